import { createHash } from 'node:crypto';

/**
 * Every Redis key Cadre uses comes from here. Keys of one task share the hash tag `{t:<taskId>}` so each Lua
 * script touches one slot and the same code runs on Redis Cluster.
 *
 *   <prefix>:{t:<id>}:meta     hash: task fields, `seq` (last appended seq), `status`
 *   <prefix>:{t:<id>}:events   stream: one entry per event, entry id `<seq>-0`
 *   <prefix>:{t:<id>}:roster   hash: worker_id → worker JSON (role, status, attempt, lease, result, ...)
 *   <prefix>:{t:<id>}:approvals  hash: approval_id → approval record JSON (see approval-store.ts)
 *   <prefix>:{t:<id>}:parked     hash: worker_id → the worker's transcript saved at its parked tool calls
 *   <prefix>:{t:<id>}:grants     set: approvalGrant(tool, arguments) approved for the rest of the task
 *   <prefix>:stats:tasks       hash: status → count of tasks that reached it (metrics only)
 *   <prefix>:tasks:enqueueing  sorted set: task id → ms its creation began; left behind only by a gateway that
 *                              died before enqueueing the task's jobs (a sweeper enqueues those)
 *   <prefix>:sessions:enqueueing  sorted set: `<sessionId> <nonce>` → ms a change that may wake a turn began;
 *                              left behind only by a process that died before enqueueing the turn's job
 * (A task created with an Idempotency-Key has an id derived from workspace and key, so it needs no key of its own.)
 *
 *
 * Runs live under their workspace's tag `{w:<ws>}` (see lua/includes/run-log.lua for the keys derived there):
 *   <prefix>:{w:<ws>}:workers|queue|active|expiry|runs|leases|cmds:<worker>|run:<id>:meta|run:<id>:events
 *   <prefix>:{w:<ws>}:run:<id>:approvals  hash: approval_id → a VM run's approval record (lua/askRunApprovals-1.lua)
 *   <prefix>:{w:<ws>}:tasks    set: the workspace's unfinished team tasks (for stop-all)
 *   <prefix>:{w:<ws>}:tasklist zset (scores 0): `<9999999999999 - created ms>:<taskId>`, newest first by member
 *   <prefix>:{w:<ws>}:approval-policy  string: the workspace's approval rules (JSON)
 *   <prefix>:{w:<ws>}:approvals:meta|events  the workspace's approvals inbox log (hash with `seq`, stream
 *                              `<seq>-0`): approval_requested / approval_decided with the record (SSE inbox)
 *   <prefix>:{w:<ws>}:approvals:pending:task|session|run  zset: pending approval id → its deadline (ms), kept
 *                              with the inbox (lua/includes/approval-inbox.lua; a session's asks also indexed
 *                              before their script, lua/indexPendingApprovals-1.lua); expires a day past its latest
 *                              deadline; cadre_approvals_pending counts it, the inbox listing finds sessions' by it
 *   <prefix>:runidx:{<runId>}  string: the run's workspace (a run id alone must find its slot)
 *   <prefix>:workspaces        set: workspaces that have had runs, tasks or approvals (lease sweeper, stop-all,
 *                              the pending-approvals gauge, GET /api/workspaces)
 *   <prefix>:sessions:parked   sorted set: session id → ms its turn parked (waiting on clients or approvals);
 *                              cadre_sessions_parked counts it, a continuation's claim takes the session out
 *
 * Sessions live under their own tag `{s:<sessionId>}`:
 *   <prefix>:{s:<id>}:meta        hash: session fields, `seq`, `status`, `lease`, `wake` (see lua/includes/session-log.lua)
 *   <prefix>:{s:<id>}:events      stream: the session's ordered log, entry id `<seq>-0`
 *   <prefix>:{s:<id>}:transcript  list: the conversation as chat messages (JSON), one per model-turn boundary
 *   <prefix>:{s:<id>}:calls       hash: tool_call_id → the current turn's client tool call (JSON)
 *   <prefix>:{s:<id>}:approvals   hash: approval_id → an earlier turn's call that asked (JSON, as in calls)
 *   <prefix>:{s:<id>}:steer       list: queued steering messages (JSON {input_id, content, queued_at}), oldest first
 *   <prefix>:{s:<id>}:followup    list: queued follow-up messages, same shape (see lua/includes/session-inputs.lua)
 *   <prefix>:{s:<id>}:grants      set: approvalGrant(tool, arguments) approved for the rest of the session
 *
 *   <prefix>:{w:<ws>}:conv    hash: WindieOS conversation_ref → `<owner> <sessionId>` (owner: the key that bound it)
 *
 * Pub/sub. Appends are announced on Redis 7 shard channels in the slot of the log they wake (SPUBLISH from the
 * append script itself; a gateway SSUBSCRIBEs only while it watches that log), message `<logId> <seq>`:
 *   <prefix>:{t:<id>}:appended   a task's log          <prefix>:{s:<id>}:appended   a session's log
 *   <prefix>:{w:<ws>}:appended   every run log of the workspace (log id `run:<runId>`) and its approvals
 *                                inbox (log id `approvals:<ws>`)
 * `<prefix>:cancel` (classic pub/sub, message `<taskId|sessionId>`, cluster-wide) reaches running agent loops.
 *
 * On Redis Cluster: every key of a task, session or workspace carries its hash tag, so each script and MULTI is
 * on one slot. The few global keys (`stats:tasks`, `tasks:enqueueing`, `sessions:enqueueing`, `sessions:parked`, `workspaces`, `runidx:{<runId>}`) are
 * each written by a command of their own, beside the scripts, never inside one; BullMQ's keys share the tag
 * `{<prefix>:bull}`.
 */
export interface SessionKeys {
  meta: string;
  events: string;
  transcript: string;
  calls: string;
  steer: string;
  followUp: string;
  /** Earlier turns' calls that asked for approval (the current turn's are in `calls`). */
  approvals: string;
  /** approvalGrant(tool, arguments) approved for the rest of the session (lua/decideSessionApproval-5.lua). */
  grants: string;
}

export interface TaskKeys {
  meta: string;
  events: string;
  roster: string;
}

export class KeyBuilder {
  readonly prefix: string;

  constructor(prefix = 'cadre') {
    this.prefix = prefix;
  }

  task(taskId: string): TaskKeys {
    const tag = `${this.prefix}:{t:${taskId}}`;
    return { meta: `${tag}:meta`, events: `${tag}:events`, roster: `${tag}:roster` };
  }

  session(sessionId: string): SessionKeys {
    const tag = `${this.prefix}:{s:${sessionId}}`;
    return {
      meta: `${tag}:meta`, events: `${tag}:events`, transcript: `${tag}:transcript`, calls: `${tag}:calls`, steer: `${tag}:steer`, followUp: `${tag}:followup`,
      approvals: `${tag}:approvals`, grants: `${tag}:grants`,
    };
  }

  /** A task's approval records and parked workers (same hash tag as the task, so one script touches all). */
  taskApprovals(taskId: string): { approvals: string; parked: string; grants: string } {
    const tag = `${this.prefix}:{t:${taskId}}`;
    return { approvals: `${tag}:approvals`, parked: `${tag}:parked`, grants: `${tag}:grants` };
  }

  /** The workspace's approvals inbox log (announced on the workspace's channel as log id `approvals:<ws>`). */
  approvalInbox(workspaceId: string): { meta: string; events: string } {
    const base = `${this.workspace(workspaceId)}:approvals`;
    return { meta: `${base}:meta`, events: `${base}:events` };
  }

  /** The workspace's pending approvals by owner kind (zsets approval id → deadline), as approval-inbox.lua derives them. */
  approvalsPending(workspaceId: string): Record<'task' | 'session' | 'run', string> {
    const base = `${this.workspace(workspaceId)}:approvals:pending`;
    return { task: `${base}:task`, session: `${base}:session`, run: `${base}:run` };
  }

  approvalPolicy(workspaceId: string): string {
    return `${this.workspace(workspaceId)}:approval-policy`;
  }

  tasksEnqueueing(): string {
    return `${this.prefix}:tasks:enqueueing`;
  }

  /** The task reconciler's turn (one pass per cluster per interval) and where its walk goes on. */
  tasksReconcileTurn(): string {
    return `${this.prefix}:tasks:reconcile:turn`;
  }

  tasksReconcilePlace(): string {
    return `${this.prefix}:tasks:reconcile:place`;
  }

  sessionsEnqueueing(): string {
    return `${this.prefix}:sessions:enqueueing`;
  }

  sessionsParked(): string {
    return `${this.prefix}:sessions:parked`;
  }

  /** The base every run key of a workspace is derived from (in Lua as well). */
  workspace(workspaceId: string): string {
    return `${this.prefix}:{w:${workspaceId}}`;
  }

  /** A run's keys (the same shapes run-log.lua derives from the workspace base). */
  run(workspaceId: string, runId: string): { meta: string; events: string } {
    const base = `${this.workspace(workspaceId)}:run:${runId}`;
    return { meta: `${base}:meta`, events: `${base}:events` };
  }

  /** The workspace's `/ws` conversation refs, each with the key that owns it (lua/bindConversation-1.lua). */
  conversations(workspaceId: string): string {
    return `${this.workspace(workspaceId)}:conv`;
  }

  /** A run's tool-call approvals (hash approval_id → record), as run-log.lua derives it. */
  runApprovals(workspaceId: string, runId: string): string {
    return `${this.workspace(workspaceId)}:run:${runId}:approvals`;
  }

  /** A workspace's run listing (zset by creation) and active runs (set), as run-log.lua derives them. */
  workspaceRuns(workspaceId: string): { listing: string; active: string } {
    const base = this.workspace(workspaceId);
    return { listing: `${base}:runs`, active: `${base}:active` };
  }

  /** The workspace's VM workers (KEYS[1] of every run script; run-log.lua derives the other run keys from it). */
  workspaceWorkers(workspaceId: string): string {
    return `${this.workspace(workspaceId)}:workers`;
  }

  workspaceTasks(workspaceId: string): string {
    return `${this.workspace(workspaceId)}:tasks`;
  }

  /** The workspace's task listing, newest first (GET /api/tasks). */
  workspaceTaskList(workspaceId: string): string {
    return `${this.workspace(workspaceId)}:tasklist`;
  }

  runIndex(runId: string): string {
    return `${this.prefix}:runidx:{${runId}}`;
  }

  workspaces(): string {
    return `${this.prefix}:workspaces`;
  }

  runIdempotency(workspaceId: string, key: string): string {
    return `${this.workspace(workspaceId)}:idem:${createHash('sha256').update(key).digest('hex')}`;
  }

  taskStats(): string {
    return `${this.prefix}:stats:tasks`;
  }

  /** The shard channel announcing appends to a task's log (its slot: the task's append scripts SPUBLISH on it). */
  taskAppended(taskId: string): string {
    return `${this.prefix}:{t:${taskId}}:appended`;
  }

  sessionAppended(sessionId: string): string {
    return `${this.prefix}:{s:${sessionId}}:appended`;
  }

  /** One shard channel for every run log of a workspace: a heartbeat appends to runs it only finds in the script. */
  runsAppended(workspaceId: string): string {
    return `${this.workspace(workspaceId)}:appended`;
  }

  cancelChannel(): string {
    return `${this.prefix}:cancel`;
  }

  /** BullMQ's own prefix: a hash tag keeps each queue's keys in one slot, as BullMQ requires on Cluster. */
  bullPrefix(): string {
    return `{${this.prefix}:bull}`;
  }

  /** A BullMQ job's hash (BullMQ's `<prefix>:<queue>:<jobId>`), e.g. to read its timestamps. */
  bullJob(queue: string, jobId: string): string {
    return `${this.bullPrefix()}:${queue}:${jobId}`;
  }
}
