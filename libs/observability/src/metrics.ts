import http from 'node:http';
import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { droppedLogLines } from './log-destination.ts';

export type MetricsRegistry = Registry;

/** A registry per process (not the global one), so tests can run several apps in one process. */
export function createMetricsRegistry(app: string): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ app });
  collectDefaultMetrics({ register: registry });
  let reported = 0;
  new Counter({
    name: 'cadre_log_lines_dropped_total',
    help: 'Log lines dropped because standard output was not keeping up (or was gone)',
    registers: [registry],
    collect() {
      const dropped = droppedLogLines();
      this.inc(dropped - reported);
      reported = dropped;
    },
  });
  return registry;
}

/** What `/readyz` answers: ready, or not with a short reason (`starting`, `redis_unavailable`, `draining`, ...). */
export type Readiness = { ready: true } | { ready: false; reason: string };

/**
 * `/metrics`, `/healthz` and `/readyz` on a port of its own, for processes that serve nothing else (worker,
 * vm-agent). The probes answer as the gateway's do: `/healthz` 200 `{"status":"ok"}` while the process and its event
 * loop answer; `/readyz` 200 `{"status":"ready"}`, or 503 `{"status":"not_ready","reason":...}`. Port 0 picks a free
 * one (tests); the bound port is on `address()`.
 */
export async function serveMetrics(opts: { port: number; host: string; registry: Registry; readiness: () => Promise<Readiness> }): Promise<http.Server> {
  const json = (res: http.ServerResponse, status: number, body: object): void =>
    void res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify(body));
  const server = http.createServer((req, res) => {
    const path = req.url?.split('?')[0];
    if (req.method !== 'GET') return void res.writeHead(404).end();
    if (path === '/healthz') return json(res, 200, { status: 'ok' });
    if (path === '/readyz') {
      return void opts.readiness().catch((): Readiness => ({ ready: false, reason: 'check_failed' })).then((r) =>
        r.ready ? json(res, 200, { status: 'ready' }) : json(res, 503, { status: 'not_ready', reason: r.reason }));
    }
    if (path !== '/metrics') return void res.writeHead(404).end();
    opts.registry.metrics().then(
      (body) => res.writeHead(200, { 'content-type': opts.registry.contentType }).end(body),
      () => res.writeHead(500).end(),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => resolve());
  });
  return server;
}

/**
 * `cadre_events_appended_total{log}`: the events this process's append scripts wrote, per kind of log (task, run,
 * session, approvals). Every process that appends exposes it, so its sum over processes is the cluster-wide rate.
 */
export function eventsAppendedMetric(registry: Registry, appended: () => Readonly<Record<string, number>>): void {
  new Counter({
    name: 'cadre_events_appended_total',
    help: 'Events appended by this process to task, run, session and approvals logs (sum over processes for the cluster-wide rate)',
    labelNames: ['log'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [log, n] of Object.entries(appended())) this.inc({ log }, n);
    },
  });
}

/**
 * Keeps a label's values bounded when they come from users (model names in a team spec): the first `max`
 * distinct values are kept, later new ones are reported as `other`.
 */
export class BoundedLabel {
  private readonly seen = new Set<string>();
  private readonly max: number;

  constructor(max: number) {
    this.max = max;
  }

  value(raw: string): string {
    if (this.seen.has(raw)) return raw;
    if (this.seen.size >= this.max) return 'other';
    this.seen.add(raw);
    return raw;
  }
}

/** Latency buckets (seconds) for model calls and turns: streaming answers take from ~100 ms to minutes. */
const MODEL_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

/**
 * The agent loop's metrics (worker and vm-agent): model calls, tokens and latency per model, turn durations, tool
 * calls. The returned object is the loop's observer (`runAgent({ observer })`).
 */
export function agentMetrics(registry: Registry) {
  const models = new BoundedLabel(32);
  const calls = new Counter({ name: 'cadre_model_requests_total', help: 'Model calls (one streaming chat completion each, retries inside the client included), by model and outcome', labelNames: ['model', 'outcome'], registers: [registry] });
  const latency = new Histogram({ name: 'cadre_model_request_duration_seconds', help: 'Model call duration (first byte to last chunk), by model', labelNames: ['model'], buckets: MODEL_BUCKETS, registers: [registry] });
  const tokens = new Counter({ name: 'cadre_model_tokens_total', help: 'Tokens used by model calls, by model and type (input, output)', labelNames: ['model', 'type'], registers: [registry] });
  const turns = new Histogram({ name: 'cadre_agent_turn_duration_seconds', help: 'Agent turn duration: one model call and the tool calls it asked for', buckets: MODEL_BUCKETS, registers: [registry] });
  const tools = new Counter({ name: 'cadre_tool_calls_total', help: 'Tool calls by tool and outcome (ok, error, aborted)', labelNames: ['tool', 'outcome'], registers: [registry] });
  const toolSeconds = new Histogram({ name: 'cadre_tool_call_duration_seconds', help: 'Tool call duration by tool', labelNames: ['tool'], buckets: [0.001, 0.01, 0.1, 0.5, 1, 5, 30, 120], registers: [registry] });
  return {
    modelCall(call: { model: string; outcome: string; seconds: number; inputTokens: number; outputTokens: number }): void {
      const model = models.value(call.model);
      calls.inc({ model, outcome: call.outcome });
      latency.observe({ model }, call.seconds);
      if (call.inputTokens > 0) tokens.inc({ model, type: 'input' }, call.inputTokens);
      if (call.outputTokens > 0) tokens.inc({ model, type: 'output' }, call.outputTokens);
    },
    turn(turn: { seconds: number }): void {
      turns.observe(turn.seconds);
    },
    toolCall(call: { tool: string; outcome: string; seconds: number }): void {
      tools.inc({ tool: call.tool, outcome: call.outcome });
      toolSeconds.observe({ tool: call.tool }, call.seconds);
    },
  };
}

/** Approval outcomes (a decision's status). Each series exists from the start, at 0, so rates see the first one. */
const APPROVAL_OUTCOMES = ['approved', 'denied', 'expired', 'cancelled'] as const;

/**
 * Approval decisions made in this process (gateway: operators' decisions and cancels; worker: deadlines), each
 * counted once, and how long each waited (request → decision). The returned function is the stores' `onDecided`.
 */
export function approvalMetrics(registry: Registry): (records: readonly { status: string; created_at: number; decided_at?: number }[]) => void {
  const decisions = new Counter({ name: 'cadre_approval_decisions_total', help: 'Approvals decided by this process, by outcome (approved, denied, expired, cancelled)', labelNames: ['outcome'], registers: [registry] });
  const wait = new Histogram({ name: 'cadre_approval_wait_seconds', help: 'Time from an approval\'s request to its decision, by outcome', labelNames: ['outcome'], buckets: [1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600], registers: [registry] });
  for (const outcome of APPROVAL_OUTCOMES) {
    decisions.inc({ outcome }, 0);
    wait.zero({ outcome });
  }
  return (records) => {
    for (const r of records) {
      const outcome = (APPROVAL_OUTCOMES as readonly string[]).includes(r.status) ? r.status : 'other';
      decisions.inc({ outcome });
      if (r.decided_at) wait.observe({ outcome }, Math.max(0, r.decided_at - r.created_at) / 1000);
    }
  };
}

/** How a session turn ended (turn_complete's stop reason); a model's rarer finish reasons count as `other`. */
const TURN_OUTCOMES = ['end_turn', 'max_tokens', 'max_turns', 'denied', 'error', 'cancelled'] as const;

/** Session turn durations span model calls and waits for clients and approvals: from a second to an hour. */
const TURN_BUCKETS = [0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600];

/**
 * Session turns ended by this process (`cadre_session_turns_total` by outcome, and each one's duration from its
 * start, parked waits included): on the worker for turns its loops end or give up on, on the gateway for turns a
 * client cancels or aborts or a close cuts short. The SessionEngine's `turns` observer.
 */
export function sessionTurnEnds(registry: Registry) {
  const turns = new Counter({ name: 'cadre_session_turns_total', help: 'Session turns ended by this process, by outcome (the turn_complete stop reason: end_turn, max_tokens, max_turns, denied, error, cancelled, other)', labelNames: ['outcome'], registers: [registry] });
  for (const outcome of TURN_OUTCOMES) turns.inc({ outcome }, 0);
  const seconds = new Histogram({ name: 'cadre_session_turn_duration_seconds', help: 'Session turn duration: user message → turn_complete, waits for clients and approvals included', buckets: TURN_BUCKETS, registers: [registry] });
  return {
    turnEnded(turn: { outcome: string; seconds?: number }): void {
      turns.inc({ outcome: (TURN_OUTCOMES as readonly string[]).includes(turn.outcome) ? turn.outcome : 'other' });
      if (turn.seconds !== undefined) seconds.observe(turn.seconds);
    },
  };
}

/**
 * The worker's session turn metrics: the turns it ends (sessionTurnEnds) and each parked turn's wait (park → the
 * continuation's claim). The TurnRunner's `turns` observer.
 */
export function sessionTurnMetrics(registry: Registry) {
  const ends = sessionTurnEnds(registry);
  const parked = new Histogram({ name: 'cadre_session_park_duration_seconds', help: 'How long a parked session turn waited: its park → the continuation job\'s claim on a worker', buckets: TURN_BUCKETS, registers: [registry] });
  return {
    turnEnded: ends.turnEnded,
    resumed(resume: { parkedSeconds: number }): void {
      parked.observe(resume.parkedSeconds);
    },
  };
}
