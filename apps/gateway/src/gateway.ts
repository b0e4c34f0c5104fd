import { Counter, Gauge, Histogram } from 'prom-client';
import { awaitWithin } from '@cadre/lifecycle';
import { approvalMetrics, bullmqTelemetry, createMetricsRegistry, eventsAppendedMetric, logInboxFailure, scrubError, sessionTurnEnds, type Logger } from '@cadre/observability';
import { SessionEngine, SessionQueue, SessionReadRepair } from '@cadre/session';
import { AGENT_QUEUE, EventFanout, KeyBuilder, RunStore, SessionStore, ApprovalStore, TaskStore, TeamQueue, eventsAppendedOver, type LoggedEvent } from '@cadre/store';
import { ApprovalService } from './approvals/approval-service.ts';
import { Authenticator } from './auth.ts';
import { agentService } from './grpc/agent.service.ts';
import { daemonService, publicEndpoint } from './grpc/daemon.service.ts';
import { kontekstAgentService } from './grpc/kontekst.service.ts';
import { createGrpcServer } from './grpc/server.ts';
import { grpcTelemetry } from './grpc/telemetry.ts';
import { grpcAuthRefusals } from './grpc/auth-refusals.ts';
import { AuthRefusalLog } from './auth-refusals.ts';
import { buildHttpApp } from './http/app.ts';
import { SseSessions } from './http/sse.ts';
import { listenOnePort, type OnePortListener } from './net/one-port.ts';
import { connectGatewayRedis } from './redis-connections.ts';
import { TaskService } from './tasks/task-service.ts';
import { RunService } from './runs/run-service.ts';
import { RunApprovals } from './runs/run-approvals.ts';
import { RunsAuthenticator } from './runs/runs-auth.ts';
import { LeaseSweeper } from './runs/lease-sweeper.ts';
import { EnqueueSweeper } from './tasks/enqueue-sweeper.ts';
import { ReadRepair } from './tasks/read-repair.ts';
import { RECONCILE_ACTIONS, TaskReconciler } from './tasks/task-reconciler.ts';
import type { RedisTarget } from '@cadre/config';
import type { GatewayConfig } from './config.ts';

export interface Gateway {
  port: number;
  fanout: EventFanout;
  /** Drains and closes; a second call returns the first one's promise. */
  close(): Promise<void>;
}

export interface GatewayOptions {
  /** What kontekst's DaemonService Shutdown does (main.ts: the same as SIGTERM); default: close this gateway. */
  requestShutdown?: () => void;
  /** Tests: answer 500 when a response schema drops or changes a field its handler returned (see response-check.ts). */
  checkResponses?: boolean;
}

/**
 * Wires a gateway from its config and starts it on one port (REST + gRPC). Used by main.ts and by tests,
 * which run several gateways against one Redis.
 */
export async function startGateway(config: GatewayConfig & { redis: RedisTarget }, logger: Logger, opts: GatewayOptions = {}): Promise<Gateway> {
  const startedAt = new Date();
  const keys = new KeyBuilder(config.keyPrefix);
  const onRedisError = (err: Error): void => logger.warn({ err: scrubError(err) }, 'redis connection error');
  const { commands: redis, queue: bullConnection, heartbeats: heartbeatRedis, subscriber } = connectGatewayRedis(config.redis, onRedisError);
  const store = new TaskStore({ redis, keys, retentionSec: config.retentionSec, maxEventsPerTask: config.maxEventsPerTask });
  const telemetry = bullmqTelemetry();
  const queue = new TeamQueue({ connection: bullConnection, keys, telemetry, onError: (err) => logger.warn({ err: scrubError(err) }, 'bullmq queue error') });
  const metrics = createMetricsRegistry('gateway');
  // Append (the event's timestamp, Redis's clock) → written to live watchers' streams. Two populations, two
  // histograms: the caught-up watchers, once per event per tail after its write to the last of them (not per
  // delivery: a parse and an observe for each of 100 watchers were 9% of a fan-out's CPU); and the watchers behind,
  // once per batch taken late from a watcher's buffer (its oldest event; a for-await reader: each event).
  const lagBuckets = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
  const fanoutLag = new Histogram({ name: 'cadre_fanout_lag_seconds', help: 'Delay from an event\'s append to its write to the caught-up live watchers (gRPC, SSE, session streams): once per event per tail, after the last of them', buckets: lagBuckets, registers: [metrics] });
  const fanoutLateLag = new Histogram({ name: 'cadre_fanout_late_lag_seconds', help: 'Delay from an event\'s append to its write by a watcher that was behind (full stream, busy reader): once per batch taken late from its buffer, for the batch\'s oldest event', buckets: lagBuckets, registers: [metrics] });
  const observeLag = (histogram: Histogram) => (event: LoggedEvent) => {
    const appended = event.timestamp ? Date.parse(event.timestamp) : NaN;
    if (Number.isFinite(appended)) histogram.observe(Math.max(0, Date.now() - appended) / 1000);
  };
  const fanout = new EventFanout({
    keys,
    subscriber,
    watcherBufferLimit: config.watcherBufferLimit,
    logger,
    onLiveDelivery: observeLag(fanoutLag),
    onLateDelivery: observeLag(fanoutLateLag),
  });
  await fanout.start();

  const auth = new Authenticator({ apiKey: config.apiKey, workspaceKeys: config.workspaceKeys, devMode: config.devMode });
  // Operators' decisions and the cancels of tasks, turns and sessions are decided here; deadlines on the worker.
  const onApprovalDecided = approvalMetrics(metrics);
  const approvalStore = new ApprovalStore({
    redis, keys, retentionSec: config.retentionSec, maxEventsPerTask: config.maxEventsPerTask, onDecided: onApprovalDecided,
    onInboxFailed: logInboxFailure(logger),
  });
  const reconciled = new Counter({
    name: 'cadre_tasks_reconciled_total',
    help: 'Unfinished tasks whose BullMQ jobs were lost, re-driven or failed by this gateway\'s task reconciler, by action, reason and trigger: redriven lead_job_lost (the lead\'s job was gone: added again), redriven worker_job_lost (a job its waiting lead needs was gone: added again), failed lead_job_ended (the lead\'s job had ended with the task\'s end unrecorded); trigger pass (found by its walk of the unfinished sets) or read (a client read the stuck task: read repair, which also finds a task whose listing was lost)',
    labelNames: ['action', 'reason', 'trigger'],
    registers: [metrics],
  });
  for (const [reason, action] of Object.entries(RECONCILE_ACTIONS)) for (const trigger of ['pass', 'read']) reconciled.inc({ action, reason, trigger }, 0);
  const reconciler = new TaskReconciler({
    store, queue, graceMs: config.enqueueGraceMs, intervalMs: config.taskReconcileIntervalMs, logger,
    onReconciled: (reason, trigger) => reconciled.inc({ action: RECONCILE_ACTIONS[reason], reason, trigger }),
  });
  const readRepair = new ReadRepair({ store, reconciler, graceMs: config.enqueueGraceMs, logger });
  const tasks = new TaskService({ store, approvals: approvalStore, queue, fanout, logger, defaultMaxWorkers: config.defaultMaxWorkers, readRepair });
  const sse = new SseSessions({ logger });
  const runStore = new RunStore({
    redis, heartbeatRedis, keys, retentionSec: config.retentionSec, maxEventsPerRun: config.maxEventsPerTask,
    workerTtlMs: config.runsWorkerTtlMs, maxAttempts: config.runsMaxAttempts, onDecided: onApprovalDecided,
  });
  const runs = new RunService({
    store: runStore, fanout, tasks, logger, maxActivePerWorkspace: config.runsMaxActivePerWorkspace, heartbeatIntervalMs: config.runsHeartbeatIntervalMs,
  });
  const sessionQueue = new SessionQueue({ connection: bullConnection, keys, telemetry, onError: (err) => logger.warn({ err: scrubError(err) }, 'bullmq queue error') });
  const sessionStore = new SessionStore({ redis, keys, retentionSec: config.retentionSec, idleTtlSec: config.sessionIdleTtlSec, maxEventsPerSession: config.maxEventsPerTask, inbox: approvalStore });
  const sessionsRepaired = new Counter({
    name: 'cadre_session_turns_repaired_total',
    help: 'Running session turns whose BullMQ job was lost (a failover), added again by this gateway when a client read, watched or messaged the stuck session (session read repair)',
    registers: [metrics],
  });
  const sessionRepair = new SessionReadRepair({ store: sessionStore, queue: sessionQueue, graceMs: config.enqueueGraceMs, logger, onRepaired: () => sessionsRepaired.inc() });
  const sessions = new SessionEngine({
    store: sessionStore,
    repair: sessionRepair,
    turns: sessionTurnEnds(metrics),
    queue: sessionQueue,
    fanout,
    defaultModel: config.model,
    models: config.extraModels.split(',').map((m) => m.trim()).filter(Boolean),
  });
  const runApprovals = new RunApprovals({ runs: runStore, approvals: approvalStore });
  const approvals = new ApprovalService({
    approvals: approvalStore, store, queue, sessions, fanout, runs: runStore, runApprovals,
  });
  const runsAuth = new RunsAuthenticator({ runsKey: config.runsApiKey, workspaceKeys: config.runsWorkspaceKeys, controlKey: config.runsControlApiKey });
  const enqueueSweeper = new EnqueueSweeper({ store, queue, sessions, graceMs: config.enqueueGraceMs, logger });
  const sweeper = new LeaseSweeper({ store: runStore, intervalMs: Math.max(100, Math.floor(config.runsWorkerTtlMs / 4)), logger });

  const grpcWatchers = new Gauge({ name: 'cadre_grpc_watchers', help: 'Open WatchTeam streams', registers: [metrics] });
  const sessionsOpen = new Gauge({
    name: 'cadre_sessions_open', help: 'Open session connections on this gateway by protocol: roz (StreamSession), kontekst (Run), ws (WindieOS /ws), sse (a session\'s event stream, as the board and cadre rpc follow it)',
    labelNames: ['protocol'], registers: [metrics], collect() { this.set({ protocol: 'sse' }, sse.count('session')); },
  });
  // Aborted when the gateway starts to drain: session calls end at once, started or not, with a status to retry on.
  const draining = new AbortController();
  const sessionConnections = (protocol: 'roz' | 'kontekst' | 'ws') => {
    sessionsOpen.set({ protocol }, 0);
    return { onOpen: () => sessionsOpen.inc({ protocol }), onClose: () => sessionsOpen.dec({ protocol }), draining: draining.signal };
  };
  new Gauge({
    name: 'cadre_sessions_parked', help: 'Session turns parked, waiting on client tools or approvals (cluster-wide)', registers: [metrics],
    async collect() { this.set(await sessionStore.parkedCount()); },
  });
  new Gauge({
    name: 'cadre_approvals_pending', help: 'Approvals waiting for a decision, by owner kind (task, session, run; cluster-wide)', labelNames: ['kind'], registers: [metrics],
    async collect() { for (const [kind, n] of Object.entries(await approvalStore.pendingCounts())) this.set({ kind }, n); },
  });
  new Gauge({ name: 'cadre_watchers', help: 'Open event watchers (gRPC and SSE) in this process', registers: [metrics], collect() { this.set(fanout.watcherCount()); } });
  new Gauge({ name: 'cadre_sse_streams', help: 'Open SSE streams', registers: [metrics], collect() { this.set(sse.count()); } });
  // Task creations, run relays and control, session inputs, approvals append through `redis`; heartbeats (a run's
  // assignment, lost leases) through `heartbeatRedis`.
  eventsAppendedMetric(metrics, () => eventsAppendedOver([redis, heartbeatRedis]));
  new Counter({ name: 'cadre_fanout_notifications_total', help: 'Append notifications heard on the shard channels of the logs this gateway watches', registers: [metrics], collect() { this.reset(); this.inc(fanout.appendsSeen); } });
  new Gauge({ name: 'cadre_fanout_channels', help: 'Shard channels this gateway is subscribed to (one per watched task or session, one per workspace with watched runs)', registers: [metrics], collect() { this.set(fanout.subscribedChannels()); } });
  new Counter({ name: 'cadre_fanout_tail_reads_total', help: 'Redis reads made by shared event tails', registers: [metrics], collect() { this.reset(); this.inc(fanout.tailReads); } });
  new Counter({ name: 'cadre_fanout_entries_carried_total', help: 'Events shared tails took from the append notifications that carried them, with no Redis read', registers: [metrics], collect() { this.reset(); this.inc(fanout.entriesCarried); } });
  new Gauge({
    name: 'cadre_tasks_reached_status', help: 'Tasks that have reached each status since the store began (cluster-wide; queued counts every task created)', labelNames: ['status'], registers: [metrics],
    async collect() { for (const [status, n] of Object.entries(await store.statusCounts())) this.set({ status }, n); },
  });
  new Gauge({
    name: 'cadre_queue_jobs', help: 'Jobs by queue and BullMQ state (waiting, active, delayed, waiting-children, prioritized)', labelNames: ['queue', 'state'], registers: [metrics],
    async collect() { for (const [state, n] of Object.entries(await queue.depth())) this.set({ queue: AGENT_QUEUE, state }, n); },
  });
  new Gauge({
    name: 'cadre_runs', help: 'Unfinished runs by status (cluster-wide: awaiting_worker, queued, running, paused)', labelNames: ['status'], registers: [metrics],
    async collect() {
      const counts = await runStore.activeStatusCounts();
      for (const status of ['awaiting_worker', 'queued', 'running', 'paused']) this.set({ status }, counts[status] ?? 0);
    },
  });
  new Counter({ name: 'cadre_run_heartbeats_total', help: 'VM worker heartbeats handled by this gateway', registers: [metrics], collect() { this.reset(); this.inc(runStore.heartbeats); } });
  new Counter({ name: 'cadre_run_lease_expiries_total', help: 'Run leases expired (worker stopped heartbeating) by this gateway\'s heartbeats and sweeps', registers: [metrics], collect() { this.reset(); this.inc(runStore.leaseExpiries); } });
  new Counter({ name: 'cadre_run_requeues_total', help: 'Runs put back in their queue after a lease expiry by this gateway', registers: [metrics], collect() { this.reset(); this.inc(runStore.requeues); } });

  const authRefusals = new AuthRefusalLog(logger, metrics);
  const http = buildHttpApp({
    logger,
    auth,
    authRefusals,
    tasks,
    approvals,
    runs,
    runApprovals,
    runsAuth,
    sessions,
    sse,
    metrics,
    bodyLimitBytes: config.bodyLimitBytes,
    models: sessions.models(),
    adminQueues: queue.adminQueues(),
    checkResponses: opts.checkResponses,
    wsSockets: sessionConnections('ws'),
    // Commands wait out a reconnect (maxRetriesPerRequest: null), so a PING to a Redis that is down would not
    // answer at all: while the connection is not up, the answer is "not ready" at once.
    // The heartbeat connection too: while it is down every VM agent's heartbeat waits on it and leases expire.
    isReady: async () => !draining.signal.aborted && redis.status === 'ready' && heartbeatRedis.status === 'ready' && (await awaitWithin(redis.ping(), 1_000))?.value === 'PONG',
  });
  await http.ready();
  const grpc = createGrpcServer({
    services: [agentService({
      auth, tasks, logger, onWatchStart: () => grpcWatchers.inc(), onWatchEnd: () => grpcWatchers.dec(),
      session: { sessions, keepaliveMs: config.sessionKeepaliveMs, ...sessionConnections('roz') },
    }), kontekstAgentService({
      auth, sessions, logger, approvalTimeoutSecs: config.kontekstApprovalTimeoutSecs, ...sessionConnections('kontekst'),
    }), daemonService({
      auth, runsAuth, startedAt, bind: () => `${config.host}:${listener.port}`, modelEndpoint: publicEndpoint(config.openaiBaseUrl), dataDir: config.dataDir,
      requestShutdown: () => {
        logger.info('kontekst Shutdown: draining');
        if (opts.requestShutdown) opts.requestShutdown();
        else void handle.close();
      },
    })],
    shutdownGraceMs: config.shutdownGraceMs,
    maxConcurrentStreams: config.grpcMaxConcurrentStreams,
    interceptors: [grpcTelemetry(metrics), grpcAuthRefusals(authRefusals)],
  });
  const listener: OnePortListener = await listenOnePort({ port: config.port, host: config.host, httpServer: http.server, grpcInjector: grpc.injector });
  grpc.health.setServing();
  sweeper.start();
  enqueueSweeper.start();
  reconciler.start();
  logger.info({ port: listener.port }, 'gateway listening (REST + gRPC)');

  let closing: Promise<void> | undefined;
  const handle: Gateway = {
    port: listener.port,
    fanout,
    close: () => (closing ??= drain()),
  };
  return handle;

  async function drain(): Promise<void> {
    // Drain: fail readiness and health first, stop accepting, end open streams with a resumable status
    // (clients resume from their last seq on another replica), then close servers and connections.
    draining.abort();
    sweeper.stop();
    enqueueSweeper.stop();
    // Not awaited, as the sweepers: a pass waiting on a Redis that is down would hold the drain up.
    void reconciler.stop();
    readRepair.stop();
    sessionRepair.stop();
    grpc.health.setNotServing();
    await listener.close();
    await fanout.close();
    await Promise.all([grpc.close(), http.close()]);
    authRefusals.stop();
    // Fastify closes only servers it listened on itself; this one was handed its connections.
    http.server.closeAllConnections();
    await Promise.all([queue.close(), sessionQueue.close()]);
    await Promise.all([redis, bullConnection, heartbeatRedis].map((c) => c.quit().catch(() => undefined)));
  }
}
