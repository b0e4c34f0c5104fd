// Public surface of the scripted model: the embedded default model for dev and tests (see ../README.md).
export {
  SCRIPTED_MODEL_NAME,
  startScriptedModel,
  type ScriptedModel,
  type ScriptedModelLogger,
  type ScriptedModelOptions,
} from './server.ts';
