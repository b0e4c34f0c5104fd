import type { TeamEvent } from '@cadre/protocol';

/** A stream entry as ioredis returns it: [id, [field, value, field, value, ...]]. */
export type StreamEntry = [string, string[]];

/** A flat reply of fields and values ([field, value, ...]: a stream entry's, HGETALL's from a script) as an object. */
export function fieldsOf(flat: string[]): Record<string, string> {
  const fields: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) fields[flat[i]!] = flat[i + 1]!;
  return fields;
}

/**
 * What every log entry carries, whatever its log: seq (the entry id is `<seq>-0`), the append time (field `ts`,
 * ms), the type (`t`) and the JSON payload (`p`); `fields` holds the rest for the log's own decoder.
 */
export function readEntry([id, flat]: StreamEntry): { seq: number; timestamp: string; event_type: string; payload: unknown; fields: Record<string, string> } {
  const fields = fieldsOf(flat);
  return {
    seq: Number(id.slice(0, id.indexOf('-'))),
    timestamp: new Date(Number(fields.ts)).toISOString(),
    event_type: fields.t!,
    payload: JSON.parse(fields.p ?? '{}'),
    fields,
  };
}

/** A task log entry (lua/includes/task-log.lua): also w worker, a attempt. */
export function decodeEntry(entry: StreamEntry): TeamEvent {
  const { fields, ...event } = readEntry(entry);
  return { ...event, worker_id: fields.w ? fields.w : null, attempt: Number(fields.a ?? 0) } as TeamEvent;
}

/**
 * An append notification (lua/includes/event-log.lua, appendNotice): `<logId> <seq>`, then, for an entry within
 * the notice cap, NUL and the entry's flat field list joined by NULs. Only the header is parsed here: the entry
 * is split when a tail takes it (entryOf), so a notice nobody can use costs no more than before.
 */
export interface AppendNotice {
  logId: string;
  seq: number;
  /** The whole message and where its entry starts (-1: a header alone). */
  message: string;
  entryAt: number;
}

export function parseAppendNotice(message: string): AppendNotice {
  const nul = message.indexOf('\0');
  const headerEnd = nul < 0 ? message.length : nul;
  const space = message.lastIndexOf(' ', headerEnd - 1);
  return { logId: message.slice(0, space), seq: Number(message.slice(space + 1, headerEnd)), message, entryAt: nul < 0 ? -1 : nul + 1 };
}

/** The entry a notice carries, as XRANGE returns it (entry id `<seq>-0`); undefined for a header alone. */
export function entryOf(notice: AppendNotice): StreamEntry | undefined {
  if (notice.entryAt < 0) return undefined;
  return [`${notice.seq}-0`, notice.message.slice(notice.entryAt).split('\0')];
}
