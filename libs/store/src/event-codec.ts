import type { TeamEvent } from '@cadre/protocol';

/** A stream entry as ioredis returns it: [id, [field, value, field, value, ...]]. */
export type StreamEntry = [string, string[]];

/** Fields written by appendEvent in lua/includes/task-log.lua: t type, w worker, a attempt, ts ms, p payload. */
export function decodeEntry([id, flat]: StreamEntry): TeamEvent {
  const f: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) f[flat[i]!] = flat[i + 1]!;
  return {
    seq: Number(id.slice(0, id.indexOf('-'))),
    timestamp: new Date(Number(f.ts)).toISOString(),
    event_type: f.t,
    worker_id: f.w ? f.w : null,
    attempt: Number(f.a ?? 0),
    payload: JSON.parse(f.p ?? '{}'),
  } as TeamEvent;
}
