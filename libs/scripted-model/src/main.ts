// Runs the scripted model on its own (`npm run model`). PORT (default 8081) and HOST (default 127.0.0.1).
import { startScriptedModel } from './server.ts';

function parsePort(raw: string | undefined): number {
  if (raw === undefined || raw === '') return 8081;
  const port = Number(raw);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    console.error(`PORT must be an integer from 0 to 65535, got "${raw}"`);
    process.exit(1);
  }
  return port;
}

const model = await startScriptedModel({
  port: parsePort(process.env.PORT),
  host: process.env.HOST || '127.0.0.1',
});
console.log(`scripted model listening; OPENAI_BASE_URL=${model.url}`);

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    void model.close().then(() => process.exit(0));
  });
}
