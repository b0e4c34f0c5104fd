import { setTimeout as sleep } from 'node:timers/promises';
import { Worker, type ConnectionOptions, type Job } from 'bullmq';
import { Counter, Histogram, Gauge } from 'prom-client';
import { createModelClient } from '@cadre/agent';
import { awaitWithin } from '@cadre/lifecycle';
import { agentMetrics, approvalMetrics, bullmqTelemetry, eventsAppendedMetric, logInboxFailure, scrubError, sessionTurnMetrics, type Logger, type Readiness } from '@cadre/observability';
import { SESSION_TURN_JOB, SessionQueue, TurnRunner, type SessionJobData, type SessionTurnJobData } from '@cadre/session';
import { AGENT_QUEUE, KeyBuilder, LEAD_WORKER_ID, SessionStore, StoreError, ApprovalStore, TaskStore, TeamQueue, connectRedis, endConnection, eventsAppended, type AgentJobData, type RedisClient } from '@cadre/store';
import { CancelRegistry } from './cancel-registry.ts';
import { WorkerProbes } from './probes.ts';
import { AgentJobProcessor, type AgentJobResult } from './processors/agent-job.processor.ts';
import { SessionJobProcessor, failedByStallCheck, failedTurnError, type SessionJobResult } from './processors/session-job.processor.ts';
import { SHUTDOWN_HAND_BACK_MS, type HandBackReason } from './processors/hand-back.ts';
import { TurnSweeper } from './turn-sweeper.ts';
import type { RedisTarget } from '@cadre/config';
import type { WorkerConfig } from './config.ts';

export interface WorkerPool {
  metricsPort: number | undefined;
  /** Agent loops (team workers and session turns) running in this process now. */
  runningLoops(): number;
  /**
   * Stop taking jobs; let running ones finish for `graceMs`, then hand them back and exit. Resolves within
   * graceMs + 6 s even when Redis never answers (the connections are then ended; see CLOSE_HAND_BACK_MS), saying
   * whether BullMQ's worker closed (false: it was still waiting when the bound ran out, and is left behind).
   */
  close(graceMs?: number): Promise<{ workerClosed: boolean }>;
}

/**
 * After the grace period, the time the aborted loops get to hand their jobs back (and BullMQ to move them) before
 * close() cuts the connections. close() resolves within graceMs + CLOSE_HAND_BACK_MS + CLOSE_CUT_MS (6 s past the
 * grace period) whatever Redis does.
 */
export const CLOSE_HAND_BACK_MS = SHUTDOWN_HAND_BACK_MS;
/** After the cut, how long the worker gets to see its commands rejected and close (it does at once). */
const CLOSE_CUT_MS = 1_000;

type PoolConfig = WorkerConfig & { redis: RedisTarget; openaiBaseUrl: string; openaiApiKey: string };

/**
 * A BullMQ worker running agent jobs, plus the cancel listener and the metrics and probes endpoint around it.
 * `probes`: already serving (main.ts starts them before Redis is reached); started here when not given. The pool
 * closes them last.
 */
export async function startWorkerPool(config: PoolConfig, logger: Logger, given?: WorkerProbes): Promise<WorkerPool> {
  const probes = given ?? (await WorkerProbes.start(config));
  const keys = new KeyBuilder(config.keyPrefix);
  const onRedisError = (err: Error): void => logger.warn({ err: scrubError(err) }, 'redis connection error');
  const redis = connectRedis(config.redis, 'cadre-worker', { onError: onRedisError });
  const subscriber = connectRedis(config.redis, 'cadre-worker-cancel', { onError: onRedisError });
  const store = new TaskStore({ redis, keys, retentionSec: config.retentionSec, maxEventsPerTask: config.maxEventsPerTask });
  const telemetry = bullmqTelemetry();
  const queue = new TeamQueue({ connection: redis, keys, telemetry, onError: (err) => logger.warn({ err: scrubError(err) }, 'bullmq queue error') });
  const metrics = probes.registry;
  // The worker decides approvals at their deadlines (team workers' and sessions'): those decisions count here.
  const approvals = new ApprovalStore({
    redis, keys, retentionSec: config.retentionSec, maxEventsPerTask: config.maxEventsPerTask, onDecided: approvalMetrics(metrics),
    onInboxFailed: logInboxFailure(logger),
  });
  const sessionStore = new SessionStore({ redis, keys, retentionSec: config.retentionSec, idleTtlSec: config.sessionIdleTtlSec, maxEventsPerSession: config.maxEventsPerTask, inbox: approvals });
  const sessionQueue = new SessionQueue({ connection: redis, keys, telemetry, onError: (err) => logger.warn({ err: scrubError(err) }, 'bullmq queue error') });
  const cancels = new CancelRegistry((taskId) => store.hasEnded(taskId));
  await cancels.listen({ subscriber, channel: keys.cancelChannel() });

  const jobSeconds = new Histogram({ name: 'cadre_agent_job_seconds', help: 'Agent job durations', labelNames: ['outcome'], registers: [metrics], buckets: [0.05, 0.1, 0.5, 1, 5, 15, 60, 300] });
  const lostJobs = new Counter({ name: 'cadre_agent_jobs_lost_total', help: 'Agent jobs failed after losing their worker too often', registers: [metrics] });
  // The agents' task and session events: every store here appends through `redis`.
  eventsAppendedMetric(metrics, () => eventsAppended(redis));
  new Gauge({ name: 'cadre_running_agents', help: 'Agent loops running in this process', registers: [metrics], collect() { this.set(cancels.size()); } });
  const taskSeconds = new Histogram({ name: 'cadre_task_duration_seconds', help: 'Task duration from creation to its end as the lead records it, by status', labelNames: ['status'], registers: [metrics], buckets: [0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600] });
  const handedBack = new Counter({
    name: 'cadre_agent_jobs_handed_back_total',
    help: 'Running agent jobs and session turns handed back to the queue (another attempt resumes them), by reason: worker_shutdown (the drain deadline passed), redis_unavailable (a write found Redis unavailable)',
    labelNames: ['reason'],
    registers: [metrics],
  });
  for (const reason of ['worker_shutdown', 'redis_unavailable']) handedBack.inc({ reason }, 0);
  // Counted once the job is back in the queue, so a hand-back Redis never answered (left to the stall check) is not.
  const onHandedBack = (reason: HandBackReason): void => handedBack.inc({ reason });

  const model = createModelClient({ baseURL: config.openaiBaseUrl, apiKey: config.openaiApiKey, maxRetries: config.modelRetries });
  // Team agents and session turns report model calls to one observer: one set of per-model series.
  const agentObserver = agentMetrics(metrics);
  const sessionTurns = sessionTurnMetrics(metrics);
  const processor = new AgentJobProcessor({
    store,
    approvals,
    queue,
    cancels,
    model,
    defaultModel: config.model,
    hostId: config.hostId,
    maxTurns: config.maxTurns,
    workerTimeoutMs: config.workerTimeoutMs,
    maxAttempts: config.maxAttempts,
    redisWaitMs: config.lockMs,
    logger,
    onFinished: (outcome, ms) => jobSeconds.observe({ outcome }, ms / 1000),
    onTaskFinished: (status, seconds) => taskSeconds.observe({ status }, seconds),
    observer: agentObserver,
    onHandedBack,
  });

  const sessions = new SessionJobProcessor({
    runner: new TurnRunner({
      store: sessionStore, queue: sessionQueue, model, hostId: config.hostId,
      maxModelCalls: config.maxTurns, defaultToolTimeoutMs: config.sessionToolTimeoutMs,
      watchSteering: (sessionId, onSteer) => cancels.watchSteering(sessionId, onSteer),
      workspaceRules: async (workspaceId) => (await approvals.getPolicy(workspaceId)).rules,
      observer: agentObserver,
      turns: sessionTurns,
      logger,
    }),
    cancels,
    store: sessionStore,
    logger,
    maxAttempts: config.maxAttempts,
    redisWaitMs: config.lockMs,
    turns: sessionTurns,
    onHandedBack,
  });

  // One queue, one pool of slots: team agents and session turns (and tool deadlines) share the concurrency.
  const dispatch = (job: Job<AgentJobData | SessionJobData>, token?: string): Promise<AgentJobResult | SessionJobResult> =>
    SessionJobProcessor.handles(job) ? sessions.process(job as Job<SessionJobData>, token) : processor.process(job as Job<AgentJobData>, token);
  const worker = new Worker<AgentJobData | SessionJobData, AgentJobResult | SessionJobResult>(AGENT_QUEUE, dispatch, {
    connection: redis as unknown as ConnectionOptions,
    prefix: keys.bullPrefix(),
    concurrency: config.concurrency,
    // Recovery vs load (README "Crash recovery"): a dead worker's job is retaken at the first stall check after its
    // lock expired, at most lockMs + lockMs/2 after the death. Renewals are one script per process per tick for all
    // its jobs, and one stall check per queue per interval runs cluster-wide (BullMQ's stalled-check key).
    lockDuration: config.lockMs,
    stalledInterval: Math.max(250, Math.floor(config.lockMs / 2)),
    // A stalled job goes back to wait this many times (a lost worker each time) before it fails.
    maxStalledCount: config.maxAttempts - 1,
    autorun: false,
    // Each attempt continues the trace its job was enqueued in (the context travels in the job's options).
    ...(telemetry && { telemetry }),
  });
  worker.on('lockRenewalFailed', (jobIds) => {
    for (const id of jobIds) {
      processor.abortJob(id, 'lease_lost');
      sessions.abortJob(id, 'lease_lost');
    }
  });
  worker.on('failed', (job: Job<AgentJobData | SessionJobData> | undefined, err: Error) => {
    if (!job) return;
    if (!failedByStallCheck(err.message)) {
      // A failed attempt with attempts left goes back to the queue (BullMQ's retry) and the next one resumes it.
      if (job.attemptsMade < (job.opts.attempts ?? 1) || job.name !== SESSION_TURN_JOB) return;
      // The processor threw what it had no answer for (Redis refusing writes for want of memory, a bug): the turn's
      // end must still be written, or the session stays running behind the dead job's lease. What refused the turn's
      // write may refuse this one too (Redis still over maxmemory): it is retried for a while, and after that (or
      // after this process exits) the turn sweep writes it.
      const turn = job.data as SessionTurnJobData;
      void retryRefusedWrite(() => sessions.giveUpTurn(turn, failedTurnError(err.message, config.maxAttempts))).catch((e: unknown) => {
        if (!(e instanceof StoreError)) logger.error({ err: e, sessionId: turn.sessionId }, 'could not end a failed turn; the turn sweep will');
      });
      return;
    }
    // A job that lost its worker too often is failed by BullMQ's stall check, not by our processor: record it.
    lostJobs.inc();
    if (job.name === SESSION_TURN_JOB) {
      // One try: a turn whose end this cannot write is the turn sweep's.
      void sessions.giveUpTurn(job.data as SessionTurnJobData, failedTurnError(err.message, config.maxAttempts)).catch(() => undefined);
      return;
    }
    const { taskId, workerId } = job.data as AgentJobData;
    const reason = `lost its worker ${config.maxAttempts} times`;
    void store
      .finishWorker(taskId, workerId, '', { outcome: 'failed', reason: 'worker_lost', message: reason }, workerId === LEAD_WORKER_ID ? { status: 'failed', reason: `lead ${reason}` } : undefined)
      .catch((e: unknown) => {
        if (!(e instanceof StoreError)) logger.error({ err: e, taskId, workerId }, 'could not record a lost job');
      });
  });
  worker.on('error', (err) => logger.error({ err: scrubError(err) }, 'bullmq worker error'));
  void worker.run();
  await worker.waitUntilReady();

  const sweptTurns = new Counter({
    name: 'cadre_session_turns_swept_total',
    help: 'Session turns this worker\'s turn sweep ended: their job had failed for good and the worker it failed on never wrote their end',
    registers: [metrics],
  });
  const turnSweeper = new TurnSweeper({
    queue: sessionQueue, store: sessionStore, maxAttempts: config.maxAttempts, intervalMs: config.turnSweepIntervalMs, logger,
    endTurn: (turn, error) => sessions.giveUpTurn(turn, error),
    onEnded: () => sweptTurns.inc(),
  });
  turnSweeper.start();

  let draining = false;
  // Ready while BullMQ's worker runs and both connections (jobs and writes; cancels) are ready and Redis answers.
  probes.attach(async (): Promise<Readiness> => {
    if (draining) return { ready: false, reason: 'draining' };
    if (!worker.isRunning()) return { ready: false, reason: 'worker_stopped' };
    if (redis.status !== 'ready' || subscriber.status !== 'ready') return { ready: false, reason: 'redis_unavailable' };
    const pong = await awaitWithin(redis.ping(), 1_000);
    return pong?.value === 'PONG' ? { ready: true } : { ready: false, reason: 'redis_unavailable' };
  });
  logger.info({ concurrency: config.concurrency, hostId: config.hostId, metricsPort: config.metricsPort || undefined }, 'worker pool ready');

  return {
    metricsPort: probes.port,
    runningLoops: () => cancels.size(),
    async close(graceMs = config.shutdownGraceMs) {
      draining = true;
      const sweepStopped = turnSweeper.stop();
      // worker.close() stops fetching and waits for running jobs; after the grace period the loops are aborted,
      // which makes each processor hand its job back (moveToWait) before close() resolves.
      const deadline = setTimeout(() => {
        processor.abortAll('shutdown');
        sessions.abortAll('shutdown');
      }, graceMs);
      const closing = worker.close();
      let workerClosed = true;
      const cutAt = Date.now() + graceMs + CLOSE_HAND_BACK_MS;
      if (!(await settlesWithin(closing, cutAt - Date.now()))) {
        // Redis does not answer: a command waits for it without end (maxRetriesPerRequest: null), and so do BullMQ's
        // moves of the jobs the loops ended, its wait for its blocking connection to end, and with them
        // worker.close(). Ending the connections rejects every such command: the worker closes (the jobs it could
        // not move are retaken by the stall check once their locks expire).
        logger.warn({ graceMs, handBackMs: CLOSE_HAND_BACK_MS }, 'Redis did not answer while closing: ending the connections');
        // BullMQ's blocking connection: its duplicate of `redis` (the same kind), set up before waitUntilReady resolved.
        const blocking = worker.backend.blockingClient as Promise<RedisClient> | undefined;
        await Promise.all([redis, subscriber, blocking].map(async (client) => client && endConnection(await client)));
        workerClosed = await settlesWithin(closing, CLOSE_CUT_MS);
      }
      clearTimeout(deadline);
      cancels.stop();
      await settlesWithin(Promise.all([queue.close(), sessionQueue.close(), sweepStopped]), Math.max(0, cutAt - Date.now()));
      // QUIT is a command too: it waits for a Redis that is down, so it gets what is left of the bound.
      await Promise.all([subscriber, redis].map(async (client) => {
        if (!(await settlesWithin(client.quit(), Math.max(0, cutAt - Date.now())))) client.disconnect();
      }));
      probes.close();
      return { workerClosed };
    },
  };
}

/**
 * Runs `write` until it succeeds, a StoreError says it no longer applies, or GIVE_UP_RETRIES retries have failed:
 * waits doubling from 500 ms up to 30 s apart, about ten minutes in all (a Redis out of memory waits for an
 * operator). The waits do not keep the process alive; a turn whose end this never wrote is the turn sweep's.
 */
async function retryRefusedWrite(write: () => Promise<unknown>): Promise<void> {
  for (let retry = 0; ; retry++) {
    try {
      await write();
      return;
    } catch (err) {
      if (err instanceof StoreError || retry === GIVE_UP_RETRIES) throw err;
      await sleep(Math.min(500 * 2 ** retry, 30_000), undefined, { ref: false });
    }
  }
}
const GIVE_UP_RETRIES = 25;

/** Whether `promise` settled (either way) within `ms`; it goes on regardless. */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  return (await awaitWithin(promise.then(() => undefined, () => undefined), ms)) !== undefined;
}
