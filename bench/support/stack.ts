// The whole system under test for the benches that drive tasks or sessions end to end: a private redis-server,
// the scripted model, the real gateway and a worker pool, each a process of its own, and the gateway's HTTP API
// as those benches call it.
import { BENCH_API_KEY, PROBE, profileArgs, spawnGateway, spawnScriptedModel, startPrivateRedis, type GatewayProcess } from './harness.ts';
import { spawnNode, type NodeChild } from './procs.ts';

/**
 * The worker's Node args unless a bench gives its own: the probe (event loop, GC on SIGUSR2) and, under
 * BENCH_CPU_PROF, a CPU profile in <dir>/worker/.
 */
export const workerNodeArgs = (): string[] => ['--import', PROBE, ...profileArgs('worker')];

export interface WorkerPoolOptions {
  /** Added to (or overriding) REDIS_URL, OPENAI_BASE_URL, OPENAI_API_KEY and LOG_LEVEL=warn: e.g. WORKER_CONCURRENCY. */
  env?: Record<string, string>;
  /** Before the script; `workerNodeArgs()` when left out. */
  nodeArgs?: string[];
}

/** The worker pool (apps/worker) on `redisUrl`, calling the scripted model at `modelUrl`. */
export function spawnWorkerPool(redisUrl: string, modelUrl: string, opts: WorkerPoolOptions = {}): NodeChild {
  return spawnNode('apps/worker/src/main.ts', {
    nodeArgs: opts.nodeArgs ?? workerNodeArgs(),
    env: { REDIS_URL: redisUrl, OPENAI_BASE_URL: modelUrl, OPENAI_API_KEY: 'scripted', LOG_LEVEL: 'warn', ...opts.env },
  });
}

export interface StackOptions {
  /** CADRE_KEY_PREFIX for both the gateway and the worker pool; each app's own default when left out. */
  keyPrefix?: string;
  worker?: WorkerPoolOptions;
}

export interface Stack {
  redis: Awaited<ReturnType<typeof startPrivateRedis>>;
  model: NodeChild;
  /** The OPENAI_BASE_URL the scripted model printed. */
  modelUrl: string;
  gateway: GatewayProcess;
  worker: NodeChild;
  /**
   * Stops the worker pool, the gateway, the model and Redis, in that order (the reverse of their start); every part
   * is stopped even if one fails to, then the failures are thrown together.
   */
  stop(): Promise<void>;
}

/**
 * Starts Redis, the scripted model (once it has printed its URL), the gateway (once /readyz answers) and the worker
 * pool, in that order. The pool is not waited for: each bench waits for it in its own way (a queue's workers, or a
 * warm-up turn). If a part fails to start, the parts already started are stopped before the error is thrown.
 */
export async function startStack(opts: StackOptions = {}): Promise<Stack> {
  const prefix: Record<string, string> = opts.keyPrefix === undefined ? {} : { CADRE_KEY_PREFIX: opts.keyPrefix };
  const started: { stop(): Promise<void> }[] = [];
  try {
    const redis = await startPrivateRedis();
    started.push(redis);
    const { child: model, url: modelUrl } = await spawnScriptedModel();
    started.push(model);
    const gateway = await spawnGateway({ REDIS_URL: redis.url, ...prefix });
    started.push(gateway);
    const worker = spawnWorkerPool(redis.url, modelUrl, { ...opts.worker, env: { ...prefix, ...opts.worker?.env } });
    started.push(worker);
    return { redis, model, modelUrl, gateway, worker, stop: () => stopAll(started) };
  } catch (err) {
    // The start's own error is the one thrown; a part that also fails to stop is only reported.
    await stopAll(started).catch((stopErr: unknown) => console.error('bench stack: stopping after a failed start failed too', stopErr));
    throw err;
  }
}

/** Stops `parts` last first, each one even if one before it failed; throws every failure at once. */
async function stopAll(parts: readonly { stop(): Promise<void> }[]): Promise<void> {
  const failures: unknown[] = [];
  for (const part of [...parts].reverse()) await part.stop().catch((err: unknown) => failures.push(err));
  if (failures.length === 1) throw failures[0];
  if (failures.length > 1) throw new AggregateError(failures, `${failures.length} parts of the bench stack failed to stop`);
}

/** One call to the gateway's HTTP API with the bench's key; the answer's status and its parsed JSON body. */
export async function api<T>(base: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: T }> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${BENCH_API_KEY}`, ...(body !== undefined && { 'content-type': 'application/json' }) },
    ...(body !== undefined && { body: JSON.stringify(body) }),
  });
  return { status: res.status, body: (await res.json()) as T };
}
