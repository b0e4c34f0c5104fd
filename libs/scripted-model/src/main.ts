// Runs the scripted model on its own (`npm run model`). PORT (default 8081) and HOST (default 127.0.0.1).
import { configOrExit, exitForConfig, int, listenProblem, readConfig, str } from '@cadre/config';
import { startScriptedModel } from './server.ts';

// Bad configuration (a variable, a port in use) ends the process with one line naming the variable.
const config = configOrExit('model', () =>
  readConfig(process.env, { port: int('PORT', 8081, { min: 0, max: 65535 }), host: str('HOST', '127.0.0.1') }),
);
const model = await startScriptedModel({ port: config.port, host: config.host }).catch((err: unknown) => {
  const problem = listenProblem(err, config);
  if (problem) exitForConfig('model', [problem]);
  throw err;
});
console.log(`scripted model listening; OPENAI_BASE_URL=${model.url}`);

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    void model.close().then(() => process.exit(0));
  });
}
