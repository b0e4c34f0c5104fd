import { hostname } from 'node:os';
// `npm start`: the whole stack on embedded defaults (DESIGN "Embedded defaults"). Composition root:
// config → Redis (REDIS_URL or a private redis-server) → model (OPENAI_BASE_URL or the scripted model in-process)
// → API key → gateway and worker processes → wait for /readyz → banner; then supervise until a signal or a crash.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ConfigError, configOrExit, describeRedisTarget, exitForConfig } from '@cadre/config';
import { isProcessRunning, whenParentExits } from '@cadre/lifecycle';
import { createLogPrettifier } from '@cadre/observability';
import { RedisServerNotFoundError, startEmbeddedRedis, stopLeftoverRedis, type EmbeddedRedis } from '@cadre/embedded-redis';
import { startScriptedModel, type ScriptedModel } from '@cadre/scripted-model';
import { renderBanner } from './banner.ts';
import { ServiceProcess, killAll, stopAll } from './children.ts';
import { CHILD_NODE_ARGS, childEnv } from './child-env.ts';
import { REPO_ROOT, stackConfig, type StackConfig } from './config.ts';
import { DataDirHold, type StackRecord } from './data-dir-hold.ts';
import { loadOrCreateDevApiKey } from './dev-api-key.ts';
import { loopbackFor, portUnavailable, waitForReady } from './readiness.ts';

/** Under `npm start` one Ctrl-C can reach us twice (from the terminal, and forwarded by npm): not a second press. */
const REPEAT_SIGNAL_WINDOW_MS = 1_000;

async function waitUntilGone(pid: number): Promise<void> {
  while (isProcessRunning(pid)) await sleep(20);
}

class Stack {
  redis: EmbeddedRedis | undefined;
  model: ScriptedModel | undefined;
  readonly children: ServiceProcess[] = [];
  readonly startup = new AbortController();
  private pending: Promise<unknown> = Promise.resolve();
  private redisRestart: Promise<unknown> = Promise.resolve();
  private stopping: Promise<void> | undefined;
  private firstSignalAt = 0;
  private forced = false;
  private readonly nameWidth: number;
  private readonly formatLine: ((line: string) => string) | undefined;
  private readonly config: StackConfig;
  private readonly hold: DataDirHold;

  constructor(config: StackConfig, hold: DataDirHold) {
    this.config = config;
    this.hold = hold;
    this.nameWidth = Math.max('gateway'.length, `worker-${config.workers}`.length);
    // The children always log JSON lines; people at a terminal get them pretty and coloured (LOG_FORMAT=json keeps JSON).
    const pretty = config.logFormat === 'pretty' || (config.logFormat === 'auto' && process.stdout.isTTY === true);
    this.formatLine = pretty ? createLogPrettifier({ colour: process.stdout.isTTY === true && !config.noColour }) : undefined;
  }

  get isStopping(): boolean {
    return this.stopping !== undefined;
  }

  say(message: string, to: NodeJS.WriteStream = process.stdout): void {
    to.write(`${'stack'.padEnd(this.nameWidth)} | ${message}\n`);
  }

  /** Registers a resource the moment it has started, so a stop that begins meanwhile still stops it. */
  adopt<T>(starting: Promise<T>, keep: (value: T) => void): Promise<T> {
    const kept = starting.then((value) => {
      keep(value);
      return value;
    });
    this.pending = kept.catch(() => undefined);
    return kept;
  }

  spawn(name: string, entry: string, env: Record<string, string | undefined>, nodeArgs: readonly string[]): ServiceProcess {
    const child = new ServiceProcess({ name, entry, nodeArgs, env, cwd: REPO_ROOT, nameWidth: this.nameWidth, formatLine: this.formatLine });
    this.children.push(child);
    this.say(`started ${name} (pid ${child.pid})`);
    void child.exited.then(({ code, signal }) => {
      const how = signal ? `signal ${signal}` : `code ${code}`;
      if (this.isStopping) return this.say(`${name} exited (${how})`);
      this.say(`${name} exited unexpectedly (${how}); stopping the stack`, process.stderr);
      void this.stop(1);
    });
    return child;
  }

  onSignal(signal: NodeJS.Signals): void {
    if (!this.isStopping) {
      this.firstSignalAt = Date.now();
      this.say(`${signal}: stopping (gateway and workers drain for up to ${this.config.stopGraceMs / 1000} s; Ctrl-C again to kill at once)`);
      void this.stop(0);
      return;
    }
    if (Date.now() - this.firstSignalAt < REPEAT_SIGNAL_WINDOW_MS) return;
    this.say(`${signal} again: killing everything now`, process.stderr);
    this.forced = true;
    killAll(this.children);
    this.redis?.kill('SIGKILL');
    // Exit once they are gone (or after a second), so that nothing of ours outlives us.
    const redisPid = this.redis?.pid;
    const gone = Promise.all([...this.children.map((c) => c.exited), redisPid === undefined ? undefined : waitUntilGone(redisPid)]);
    void Promise.race([gone, sleep(1_000)]).then(() => process.exit(130));
  }

  /**
   * The private redis-server exited on its own. It shares our process group, so a Ctrl-C in the terminal stops it
   * at the same moment as us; the gateway and workers could then not drain (hand back jobs, close streams) and
   * would hang until killed. So: stop the stack if that is not already happening, and while children are still
   * running, start Redis again (same port, same data) for them.
   */
  onRedisExit(details: object): void {
    const output = (details as { output?: string }).output ?? '';
    const tail = output.split('\n').slice(-2).join(' / ');
    this.say(`redis-server exited (${tail || 'no output'})`, this.isStopping ? process.stdout : process.stderr);
    if (!this.isStopping) {
      this.say('stopping the stack', process.stderr);
      void this.stop(1);
    }
    if (this.redis === undefined || this.children.every((c) => c.hasExited())) return;
    this.say('restarting redis-server so that the gateway and workers can drain');
    const redis = this.redis;
    this.redisRestart = redis.restart().then(() => this.hold.recordRedis(redis)).catch((err: unknown) => this.say(`could not restart redis-server: ${String(err)}`, process.stderr));
  }

  /** Children first (they drain against a live Redis and model), then the model, then Redis; then exit. */
  stop(code: number): Promise<void> {
    this.stopping ??= (async () => {
      this.startup.abort();
      await this.pending;
      await stopAll(this.children, this.config.stopGraceMs, (c) =>
        this.say(`${c.name} did not stop within ${this.config.stopGraceMs / 1000} s; killing it`, process.stderr),
      );
      await this.model?.close();
      await this.redisRestart;
      await this.redis?.stop();
      const exitCode = this.forced ? 130 : code;
      this.say(exitCode === 0 ? 'stopped' : `stopped (exit code ${exitCode})`);
      process.exit(exitCode);
    })();
    return this.stopping;
  }
}

async function run(stack: Stack, config: StackConfig, hold: DataDirHold): Promise<void> {
  // The children read the Redis variables themselves (passed through) when one is configured; else the private one.
  const redisUrl =
    config.redis !== undefined ? undefined : (
      await stack.adopt(
        startEmbeddedRedis({
          dataDir: join(config.dataDir, 'redis'),
          persist: true,
          logger: {
            info: (_o, msg) => stack.say(`redis: ${msg}`),
            // The library warns only when the server exits without being asked to.
            warn: (o) => stack.onRedisExit(o),
          },
        }),
        (redis) => {
          stack.redis = redis;
          hold.recordRedis(redis);
        },
      )
    ).url;
  const redisShown = config.redis !== undefined ? describeRedisTarget(config.redis) : redisUrl!;
  if (stack.isStopping) return;

  let openaiBaseUrl = config.openaiBaseUrl;
  let openaiApiKey = config.openaiApiKey;
  if (openaiBaseUrl === undefined) {
    const model = await stack.adopt(startScriptedModel({ port: 0 }), (m) => (stack.model = m));
    openaiBaseUrl = model.url;
    openaiApiKey = 'scripted';
    stack.say(`scripted model listening on ${model.url}`);
  }
  if (stack.isStopping) return;

  const keyFile = join(config.dataDir, 'dev-api-key');
  const devKey = config.apiKey === undefined ? loadOrCreateDevApiKey(keyFile) : undefined;
  if (devKey?.created) stack.say(`generated a dev API key in ${keyFile}`);
  const apiKey = config.apiKey ?? devKey!.key;
  // The runs API has its own key: VM agents hold it, and it must not open the tasks API or gRPC.
  const runsKeyFile = join(config.dataDir, 'dev-runs-key');
  const runsKey = config.runsApiKey ?? loadOrCreateDevApiKey(runsKeyFile).key;
  // stop-all needs the control key (as the original); operators hold it, VM agents never do.
  const runsControlKeyFile = join(config.dataDir, 'dev-runs-control-key');
  const runsControlKey = config.runsControlApiKey ?? loadOrCreateDevApiKey(runsControlKeyFile).key;

  const env: Record<string, string | undefined> = {
    ...config.passthroughEnv,
    ...(redisUrl !== undefined ? { REDIS_URL: redisUrl } : {}),
    OPENAI_BASE_URL: openaiBaseUrl,
    OPENAI_API_KEY: openaiApiKey,
    CADRE_API_KEY: apiKey,
    RUNS_API_KEY: runsKey,
    RUNS_CONTROL_API_KEY: runsControlKey,
    // Every child stops if this process dies without stopping it (kill -9), so nothing is left behind.
    CADRE_EXIT_WITH_PARENT: 'true',
    PORT: String(config.port),
    HOST: config.host,
    LOG_LEVEL: config.logLevel,
    WORKER_CONCURRENCY: String(config.workerConcurrency),
    // kontekst GetStatus shows it.
    CADRE_DATA_DIR: config.dataDir,
  };
  stack.spawn('gateway', 'apps/gateway/src/main.ts', childEnv('gateway', env), CHILD_NODE_ARGS.gateway);
  for (let i = 1; i <= config.workers; i++) stack.spawn(`worker-${i}`, 'apps/worker/src/main.ts', childEnv('worker', env), CHILD_NODE_ARGS.worker);
  const readyz = `http://${loopbackFor(config.host)}:${config.port}/readyz`;
  const outcome = await waitForReady(readyz, config.readyTimeoutMs, stack.startup.signal);
  if (outcome === 'aborted') return;
  if (outcome === 'timeout') {
    stack.say(`the gateway did not answer ${readyz} within ${config.readyTimeoutMs / 1000} s; stopping the stack`, process.stderr);
    return void stack.stop(1);
  }
  // VM agents heartbeat the gateway from their first second: started only once it is ready, so the first run of
  // the stack shows no connection-refused noise.
  for (let i = 1; i <= config.vmAgents; i++) {
    // A VM agent gets what a VM would have (its runs key, the model), not the control plane's secrets (Redis, the
    // tasks keys, the control key): see child-env.ts. Its shell tool runs with an environment of its own.
    stack.spawn(`vm-agent-${i}`, 'apps/vm-agent/src/main.ts', childEnv('vm-agent', {
      ...env,
      CADRE_GATEWAY_URL: `http://${loopbackFor(config.host)}:${config.port}`,
      VM_AGENT_WORKSPACE_ID: env.VM_AGENT_WORKSPACE_ID ?? 'default',
      VM_AGENT_WORKER_ID: `${env.VM_AGENT_WORKER_ID ?? hostname()}-${i}`,
      // No VM_AGENT_WORKDIR (unless set for the stack): each agent makes a temp dir of its own, outside the data
      // dir, so a run's shell neither finds the dev keys nor shares files with another checkout's agents.
    }), CHILD_NODE_ARGS['vm-agent']);
  }

  // Where the `cadre` CLI finds this stack (with the dev keys beside it) when CADRE_URL is not set.
  mkdirSync(config.dataDir, { recursive: true });
  writeFileSync(join(config.dataDir, 'gateway-url'), `${hold.gatewayUrl}\n`, { mode: 0o600 });
  process.stdout.write(
    renderBanner({
      port: config.port,
      host: config.host,
      devApiKey: devKey?.key,
      devApiKeyFile: keyFile,
      redis: { shown: redisShown, embedded: stack.redis && { pid: stack.redis.pid, dataDir: stack.redis.dataDir } },
      model: { url: openaiBaseUrl, scripted: stack.model !== undefined },
      workers: config.workers,
      workerConcurrency: config.workerConcurrency,
      vmAgents: config.vmAgents,
      devRunsKey: config.runsApiKey === undefined ? runsKey : undefined,
      devRunsKeyFile: runsKeyFile,
      devRunsControlKey: config.runsControlApiKey === undefined ? runsControlKey : undefined,
      devRunsControlKeyFile: runsControlKeyFile,
      dataDir: config.dataDir,
    }),
  );
}

/** A stack killed with -9 leaves its private redis-server running on the data dir: stop it before starting ours. */
async function stopLeftRedis(stack: Stack, left: StackRecord | undefined, dataDir: string): Promise<void> {
  if (left?.redis === undefined) return;
  const { pid, port } = left.redis;
  try {
    if ((await stopLeftoverRedis({ pid, port, dataDir })) === 'stopped') {
      stack.say(`stopped the redis-server (pid ${pid}, port ${port}) left running on ${dataDir} by a stack that did not stop (pid ${left.pid})`);
    }
  } catch (err) {
    stack.say(`${err instanceof Error ? err.message : String(err)}; not starting another on it`, process.stderr);
    process.exit(1);
  }
}

// Bad configuration ends `npm start` before anything starts, with one line per problem naming the variable.
const config: StackConfig = configOrExit('npm start', () => {
  const parsed = stackConfig(process.env);
  if (parsed.openaiBaseUrl !== undefined && parsed.openaiApiKey === undefined) {
    throw new ConfigError(['OPENAI_API_KEY: required with OPENAI_BASE_URL (any value for a server that checks none)']);
  }
  return parsed;
});
const gatewayUrl = `http://${loopbackFor(config.host)}:${config.port}`;
// Before the port: a second start from the same checkout learns that its stack runs (not to pick another PORT).
const taken = DataDirHold.take(config.dataDir, gatewayUrl);
if ('heldBy' in taken) {
  const { pid, gateway_url: url } = taken.heldBy;
  exitForConfig('npm start', [
    `CADRE_DATA_DIR: ${config.dataDir} is in use by the stack running as pid ${pid} (gateway ${url}); ` +
      `stop it (Ctrl-C where it runs, or kill ${pid}) or give this one another CADRE_DATA_DIR`,
  ]);
}
const hold = taken.held;
process.on('exit', () => hold.release());
const stack = new Stack(config, hold);
await stopLeftRedis(stack, taken.left, join(config.dataDir, 'redis'));

// A port in use would otherwise show up only as the gateway's exit after Redis, the model and workers started.
const portProblem = await portUnavailable(config.port, config.host);
if (portProblem) exitForConfig('npm start', [portProblem]);

process.on('SIGINT', () => stack.onSignal('SIGINT'));
process.on('SIGTERM', () => stack.onSignal('SIGTERM'));
// A closed terminal or a dropped ssh session: stop everything rather than leave the children behind.
process.on('SIGHUP', () => stack.onSignal('SIGHUP'));
// A closed terminal or pipe must not crash the stack mid-shutdown (children would then be SIGKILLed).
process.stdout.on('error', () => undefined);
process.stderr.on('error', () => undefined);

// `npm start` runs us under `sh -c`, and on SIGTERM npm signals only that shell, which dies without passing the
// signal on. Being re-parented is how we learn of it: stop as if we had been sent SIGTERM.
whenParentExits((parent) => {
  if (stack.isStopping) return;
  stack.say(`parent process ${parent} went away (e.g. npm was sent SIGTERM); stopping`);
  void stack.stop(0);
});
try {
  await run(stack, config, hold);
} catch (err) {
  if (err instanceof RedisServerNotFoundError) stack.say(err.message, process.stderr);
  else stack.say(`failed to start: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`, process.stderr);
  await stack.stop(1);
}
