import type { RedisClient } from './connect.ts';
import type { TaskStatus } from '@cadre/protocol';
import type { KeyBuilder } from './keys.ts';
import type { TeamMode } from './task-types.ts';

/** One line of GET /api/tasks: what a list needs, without the roster's results or the team's instructions. */
export interface TaskSummary {
  task_id: string;
  workspace_id: string;
  goal: string;
  status: TaskStatus;
  mode: TeamMode;
  team_size: number;
  created_at: string;
  updated_at: string;
  finished_at: string | null;
  failure_reason: string | null;
  last_seq: number;
}

export interface TaskListPage {
  tasks: TaskSummary[];
  /** Where the next page starts; null when this page reached the end of the listing. */
  next_cursor: string | null;
}

/** Entries kept per workspace listing (the index is bounded; older tasks are still readable by id). */
export const TASK_LIST_MAX_ENTRIES = 10_000;
/** Index entries examined per request at most, so a rare status filter cannot make one request scan everything. */
const SCAN_BOUND = 1_000;
const MAX_MS = 9_999_999_999_999;

/** Members sort ascending by inverted creation time, so the zset's lexical order is newest first. */
export function listMember(createdMs: number, taskId: string): string {
  return `${String(MAX_MS - createdMs).padStart(13, '0')}:${taskId}`;
}

/** Cursors are opaque to clients: the last member a page examined, base64url. */
export function encodeTaskCursor(member: string): string {
  return Buffer.from(member).toString('base64url');
}

/** The member a cursor points at, or null when it is not one this API handed out. */
export function decodeTaskCursor(cursor: string): string | null {
  const member = Buffer.from(cursor, 'base64url').toString();
  return /^\d{13}:[0-9a-f-]{36}$/.test(member) ? member : null;
}

const SUMMARY_FIELDS = ['task_id', 'workspace_id', 'goal', 'status', 'mode', 'created_at', 'updated_at', 'finished_at', 'failure_reason', 'seq'] as const;
const iso = (ms: string | null | undefined): string | null => (ms ? new Date(Number(ms)).toISOString() : null);

/**
 * Newest-first pages of a workspace's tasks, optionally of one status. Entries whose task has expired are
 * skipped; at most SCAN_BOUND entries are examined per call (a filtered page may come back short, with a cursor).
 */
export async function listTasks(
  redis: RedisClient,
  keys: KeyBuilder,
  workspaceId: string,
  opts: { status?: TaskStatus; afterMember?: string; limit: number },
): Promise<TaskListPage> {
  const index = keys.workspaceTaskList(workspaceId);
  const tasks: TaskSummary[] = [];
  let from = opts.afterMember === undefined ? '-' : `(${opts.afterMember}`;
  let scanned = 0;
  while (scanned < SCAN_BOUND) {
    const chunkSize = Math.min(opts.status ? 200 : opts.limit + 1, SCAN_BOUND - scanned);
    const members = await redis.zrangebylex(index, from, '+', 'LIMIT', 0, chunkSize);
    if (members.length === 0) return { tasks, next_cursor: null };
    // Every task has its own slot: the reads go out together (one write on an auto-pipelined connection, grouped
    // by node on a Cluster), not as one pipeline, which a Cluster refuses across nodes.
    const replies = await Promise.all(members.map((m) => {
      const k = keys.task(m.slice(14));
      return Promise.all([redis.hmget(k.meta, ...SUMMARY_FIELDS), redis.hlen(k.roster)]);
    }));
    for (let i = 0; i < members.length; i++) {
      const [meta, size] = replies[i]!;
      scanned++;
      from = `(${members[i]!}`;
      const summary = toSummary(meta, size);
      if (!summary || (opts.status && summary.status !== opts.status)) continue;
      tasks.push(summary);
      if (tasks.length === opts.limit) {
        const more = i < members.length - 1 || members.length === chunkSize;
        return { tasks, next_cursor: more ? encodeTaskCursor(members[i]!) : null };
      }
    }
    if (members.length < chunkSize) return { tasks, next_cursor: null };
  }
  return { tasks, next_cursor: encodeTaskCursor(from.slice(1)) };
}

function toSummary(meta: (string | null)[], teamSize: number): TaskSummary | null {
  const [taskId, workspaceId, goal, status, mode, created, updated, finished, failure, seq] = meta;
  if (!taskId || !workspaceId || !status) return null;
  return {
    task_id: taskId,
    workspace_id: workspaceId,
    goal: goal ?? '',
    status: status as TaskStatus,
    mode: (mode ?? 'named') as TeamMode,
    team_size: teamSize,
    created_at: iso(created)!,
    updated_at: iso(updated)!,
    finished_at: iso(finished),
    failure_reason: failure || null,
    last_seq: Number(seq ?? 0),
  };
}
