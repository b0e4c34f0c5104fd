import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino, type Logger } from 'pino';
import { startScriptedModel, type ScriptedModel } from '@cadre/scripted-model';
import { gatewayConfig } from '../../apps/gateway/src/config.ts';
import { startGateway, type Gateway } from '../../apps/gateway/src/gateway.ts';
import { workerConfig } from '../../apps/worker/src/config.ts';
import { startWorkerPool, type WorkerPool } from '../../apps/worker/src/worker-pool.ts';
import { TEST_API_KEY, startTestRedis, waitUntil, type TestRedis } from '@cadre/testing';

export { TEST_API_KEY };
const silent = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });
const REPO = fileURLToPath(new URL('../../', import.meta.url));

export interface StackOptions {
  gateways?: number;
  workers?: number;
  /** Extra environment for gateways and workers (as the real processes would read it). */
  env?: Record<string, string>;
  /** The Redis to run on (stopped with the stack); default: startTestRedis(). */
  redis?: TestRedis;
}

/**
 * A whole Cadre for a test: private Redis, scripted model, gateways and worker pools in this process, each
 * with its own key prefix so nothing is shared with other tests.
 */
export class TestStack {
  redis!: TestRedis;
  model!: ScriptedModel;
  gateways: Gateway[] = [];
  pools: WorkerPool[] = [];
  readonly prefix = `t${randomUUID().slice(0, 8)}`;
  private children: ChildProcess[] = [];
  private env: Record<string, string> = {};

  static async start(opts: StackOptions = {}): Promise<TestStack> {
    const stack = new TestStack();
    stack.redis = opts.redis ?? (await startTestRedis());
    stack.model = await startScriptedModel();
    stack.env = {
      ...stack.redis.env,
      OPENAI_BASE_URL: stack.model.url,
      OPENAI_API_KEY: 'scripted',
      CADRE_API_KEY: TEST_API_KEY,
      CADRE_KEY_PREFIX: stack.prefix,
      PORT: '0',
      HOST: '127.0.0.1',
      ...opts.env,
    };
    for (let i = 0; i < (opts.gateways ?? 1); i++) await stack.addGateway();
    for (let i = 0; i < (opts.workers ?? 1); i++) await stack.addWorkerPool();
    return stack;
  }

  get url(): string {
    return `http://127.0.0.1:${this.gateways[0]!.port}`;
  }

  get grpcTarget(): string {
    return `127.0.0.1:${this.gateways[0]!.port}`;
  }

  /** Resolves once no agent loop runs in this stack's worker pools (an aborted loop has returned, not just been told). */
  async loopsIdle(): Promise<void> {
    await waitUntil('the worker pools to have no running agent loop', () => this.pools.every((pool) => pool.runningLoops() === 0));
  }

  async addGateway(env: Record<string, string> = {}): Promise<Gateway> {
    const config = gatewayConfig({ ...this.env, ...env });
    // Every answer is checked against its handler's object: a response schema that drops a field fails the test.
    const gateway = await startGateway({ ...config, redis: this.redis.target }, silent, { checkResponses: true });
    this.gateways.push(gateway);
    return gateway;
  }

  /**
   * A worker pool in this process; `logger`: where it logs (default: nowhere), for a test that waits on its log;
   * `model`: the model API it calls (default: the stack's scripted model).
   */
  async addWorkerPool(env: Record<string, string> = {}, logger: Logger = silent, model = { url: this.model.url, apiKey: 'scripted' }): Promise<WorkerPool> {
    const config = workerConfig({ ...this.env, ...env });
    const pool = await startWorkerPool({ ...config, redis: this.redis.target, openaiBaseUrl: model.url, openaiApiKey: model.apiKey }, logger);
    this.pools.push(pool);
    return pool;
  }

  /** A worker as a real OS process (for kill -9). Resolves once it logged that it is ready. */
  spawnWorkerProcess(env: Record<string, string> = {}): Promise<ChildProcess> {
    return this.spawnProcess('apps/worker/src/main.ts', 'worker pool ready', env);
  }

  /** A gateway as a real OS process on a free port; resolves once it listens. */
  async spawnGatewayProcess(env: Record<string, string> = {}): Promise<{ child: ChildProcess; url: string; port: number }> {
    const port = await freePort();
    const child = await this.spawnProcess('apps/gateway/src/main.ts', 'gateway listening', { PORT: String(port), ...env });
    return { child, url: `http://127.0.0.1:${port}`, port };
  }

  /** A vm-agent as a real OS process serving `workspace`; resolves once it printed its start line. */
  spawnVmAgent(workspace: string, workerId: string, env: Record<string, string> = {}): Promise<ChildProcess> {
    return this.spawnProcess('apps/vm-agent/src/main.ts', 'serving workspace', {
      CADRE_GATEWAY_URL: env.CADRE_GATEWAY_URL ?? this.url,
      VM_AGENT_WORKSPACE_ID: workspace,
      VM_AGENT_WORKER_ID: workerId,
      VM_AGENT_WORKDIR: join(tmpdir(), `cadre-vm-${this.prefix}-${workerId}`),
      ...env,
    });
  }

  private async spawnProcess(entry: string, readyText: string, env: Record<string, string>): Promise<ChildProcess> {
    const child = spawn(process.execPath, [entry], {
      cwd: REPO,
      env: { ...process.env, ...this.env, LOG_LEVEL: 'info', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.children.push(child);
    await new Promise<void>((resolve, reject) => {
      let out = '';
      const onData = (chunk: Buffer): void => {
        out += chunk.toString();
        if (out.includes(readyText)) {
          child.stdout!.off('data', onData);
          child.stdout!.resume();
          resolve();
        }
      };
      child.stdout!.on('data', onData);
      child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
      child.once('exit', (code) => reject(new Error(`${entry} exited (${code}) before ready:\n${out}`)));
    });
    return child;
  }

  async stop(): Promise<void> {
    for (const child of this.children) if (child.exitCode === null) child.kill('SIGKILL');
    await saysIfSlow('closing the worker pools', Promise.all(this.pools.map((p) => p.close(0))));
    await saysIfSlow('closing the gateways', Promise.all(this.gateways.map((g) => g.close())));
    await saysIfSlow('closing the scripted model', this.model.close());
    await saysIfSlow('stopping Redis', this.redis.stop());
  }
}

/** A stop that hangs fails its test with a hook timeout that names nothing: this names the part still waited for. */
async function saysIfSlow<T>(what: string, done: Promise<T>, afterMs = 20_000): Promise<T> {
  const warn = setTimeout(() => process.stderr.write(`TestStack.stop: ${what} has not finished after ${afterMs} ms\n`), afterMs);
  try {
    return await done;
  } finally {
    clearTimeout(warn);
  }
}

/** A port nothing listens on right now (the OS's pick, released at once). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
