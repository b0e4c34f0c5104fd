// Where a StreamSession turn's first delta spends its time, from what Redis already records, read after a round
// (nothing is stamped in the product): the turn's BullMQ job record (`timestamp`: the gateway's Date.now() as it
// calls add; `processedOn`: the worker's Date.now() as it sends the moveToActive that takes the job; kept an hour
// by removeOnComplete) and the session log's event times (`ts`: Redis's TIME in the appending script), beside the
// client's Date.now() stamps of the send and the first delta. One clock (the machine's), ms resolution for all:
// each step is ±1 ms.
import type { Redis } from 'ioredis';
import { turnJobId } from '@cadre/session';
import { AGENT_QUEUE, KeyBuilder } from '@cadre/store';
import { summarize, type LatencySummary } from './latency.ts';

/** One turn on the wall clock (ms since the epoch), stamped by the client: its message sent, its first text delta's arrival. */
export interface TurnStamp {
  session: string;
  /** 1 for a session's first turn (its job's wake: one per turn when no tool call or steer resumes it). */
  turn: number;
  sent_ms: number;
  first_ms: number;
}

/** One turn's first delta, step by step (ms). The steps add up to the client's first delta. */
export interface TurnSteps {
  /** Client's send → the gateway calls the BullMQ add (gRPC, access check, mark + startTurn). */
  to_add: number;
  /** The add called → the worker's moveToActive that takes the job (the add's own round trip included). */
  queue_wait: number;
  /** Taken → the `activity: thinking` commit, written beside the model request (the rest of a burst's fetches, claim + load). */
  to_model: number;
  /** Model request → the first text delta committed (the model's first chunk, the worker's stream, the commit). */
  model_to_commit: number;
  /** Commit → the client has it (the append's notification, the gateway's gRPC write, the client). */
  commit_to_client: number;
}

export interface TurnSplit {
  turns: number;
  /** Turns whose job record or log events were not found (then left out). */
  missing: number;
  steps: Record<keyof TurnSteps, LatencySummary>;
  /** Per turn index (1, 2, ...: one burst per index when every session sends at once): last − first, ms. */
  bursts: { turn: number; jobs: number; add_spread_ms: number; start_spread_ms: number }[];
}

const STEPS: (keyof TurnSteps)[] = ['to_add', 'queue_wait', 'to_model', 'model_to_commit', 'commit_to_client'];

/** Reads the job records and session logs of `stamps`' turns from the gateway's Redis (`prefix`: CADRE_KEY_PREFIX). */
export async function splitFirstDeltas(redis: Redis, prefix: string, stamps: TurnStamp[]): Promise<TurnSplit> {
  const keys = new KeyBuilder(prefix);
  const sessions = [...new Set(stamps.map((s) => s.session))];
  const jobs = redis.pipeline();
  for (const s of stamps) jobs.hmget(keys.bullJob(AGENT_QUEUE, turnJobId(s.session, s.turn)), 'timestamp', 'processedOn');
  const logs = redis.pipeline();
  for (const id of sessions) logs.xrange(keys.session(id).events, '-', '+');
  const [jobReplies, logReplies] = await Promise.all([jobs.exec(), logs.exec()]);
  // Per session, per turn: the user_message, the `activity: thinking` beside the model request, the first text delta.
  const marks = new Map<string, Map<number, { thinking?: number; delta?: number }>>();
  sessions.forEach((id, i) => {
    const turns = new Map<number, { thinking?: number; delta?: number }>();
    let current: { thinking?: number; delta?: number } | undefined;
    for (const [, flat] of (logReplies?.[i]?.[1] ?? []) as [string, string[]][]) {
      const f: Record<string, string> = {};
      for (let k = 0; k < flat.length; k += 2) f[flat[k]!] = flat[k + 1]!;
      const ts = Number(f.ts);
      if (f.t === 'user_message') turns.set((JSON.parse(f.p!) as { turn: number }).turn, (current = {}));
      else if (current && f.t === 'activity' && current.thinking === undefined && (JSON.parse(f.p!) as { state: string }).state === 'thinking') current.thinking = ts;
      else if (current && f.t === 'text_delta' && current.delta === undefined) current.delta = ts;
    }
    marks.set(id, turns);
  });
  const found: (TurnStamp & TurnSteps & { added: number; taken: number })[] = [];
  stamps.forEach((s, i) => {
    const [timestamp, processedOn] = (jobReplies?.[i]?.[1] ?? []) as (string | null)[];
    const m = marks.get(s.session)?.get(s.turn);
    if (!timestamp || !processedOn || m?.thinking === undefined || m.delta === undefined) return;
    const added = Number(timestamp);
    const taken = Number(processedOn);
    found.push({
      ...s, added, taken,
      to_add: added - s.sent_ms, queue_wait: taken - added, to_model: m.thinking - taken, model_to_commit: m.delta - m.thinking, commit_to_client: s.first_ms - m.delta,
    });
  });
  const steps = Object.fromEntries(STEPS.map((k) => [k, summarize(Float64Array.from(found, (t) => t[k]))])) as TurnSplit['steps'];
  const bursts = [...new Set(found.map((t) => t.turn))].sort((a, b) => a - b).map((turn) => {
    const of = found.filter((t) => t.turn === turn);
    const spread = (xs: number[]): number => Math.max(...xs) - Math.min(...xs);
    return { turn, jobs: of.length, add_spread_ms: spread(of.map((t) => t.added)), start_spread_ms: spread(of.map((t) => t.taken)) };
  });
  return { turns: found.length, missing: stamps.length - found.length, steps, bursts };
}
