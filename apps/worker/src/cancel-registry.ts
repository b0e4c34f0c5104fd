import type { RedisClient } from '@cadre/store';

/** Why a running agent loop was aborted; decides what (if anything) the processor records. */
export type AbortCause = 'cancelled' | 'shutdown' | 'lease_lost';

const STEER_PREFIX = 'steer:';

/**
 * How the once-a-second check tells that a loop's owner ended without the message reaching us, asked of the
 * store. Tasks: the task's status turned terminal. Session turns: the turn's lease changed.
 */
export type DurableCheck = () => Promise<boolean>;

/**
 * The running loops of this process by task (or session), so a cancel published by any gateway reaches them within
 * milliseconds (BullMQ's cancelJob only reaches the worker it is called on). The durable half of cancel is the
 * task's status: every event append checks it, and a once-a-second check of the running tasks' status catches a
 * cancel whose message was lost (published while this subscriber was reconnecting) while a loop sits in a long
 * model call or tool.
 */
export class CancelRegistry {
  private readonly running = new Map<string, Set<AbortController>>();
  /** The lease (BullMQ lock token) a session turn's loop runs under, so a cancel can name that turn only. */
  private readonly leases = new WeakMap<AbortController, string>();
  private readonly checks = new Map<string, DurableCheck>();
  private readonly steerWatchers = new Map<string, Set<() => void>>();
  private timer: NodeJS.Timeout | undefined;
  /** `taskEnded`: the durable check of a task's loops (a session's comes with its registration). */
  private readonly taskEnded: (taskId: string) => Promise<boolean>;

  private stopped = false;

  constructor(taskEnded: (taskId: string) => Promise<boolean>) {
    this.taskEnded = taskEnded;
  }

  async listen(opts: { subscriber: RedisClient; channel: string; checkEveryMs?: number }): Promise<void> {
    const { subscriber } = opts;
    subscriber.on('message', (_channel: string, message: string) => {
      // `steer:<sessionId>`: a steer in interrupt mode immediate (lua/queueInput-8.lua), not a cancel.
      if (message.startsWith(STEER_PREFIX)) return this.steer(message.slice(STEER_PREFIX.length));
      // `<taskId>` or `<sessionId>` (a closed session: every loop of it), or `<sessionId> <lease>`: one ended turn's
      // loop (cancelTurn, abortTurn), while the turn started after it in the same script runs on.
      const [id, lease] = message.split(' ', 2) as [string, string | undefined];
      this.abortTask(id, 'cancelled', lease);
    });
    subscriber.on('ready', () => void this.checkStatuses());
    await subscriber.subscribe(opts.channel);
    const every = opts.checkEveryMs ?? 1_000;
    const tick = (): void => {
      if (this.stopped) return;
      this.timer = setTimeout(() => void this.checkStatuses().finally(tick), every);
      this.timer.unref();
    };
    tick();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  /** One read for every task or session with a running loop here, sent together; aborts the loops whose owner ended. */
  private async checkStatuses(): Promise<void> {
    const ids = [...this.running.keys()];
    if (ids.length === 0) return;
    // One slot per task: the reads go out together rather than as one pipeline (a Cluster refuses one across nodes).
    // A read that fails counts as not ended: the next check asks again.
    const ended = await Promise.all(ids.map((id) => (this.checks.get(id) ?? (() => this.taskEnded(id)))().catch(() => false)));
    ended.forEach((yes, i) => {
      if (yes) this.abortTask(ids[i]!, 'cancelled');
    });
  }

  /** Registers a loop of `taskId` (a task, or a session with its own durable check and its turn's lease). */
  register(taskId: string, check?: DurableCheck, lease?: string): AbortController {
    if (check) this.checks.set(taskId, check);
    const ac = new AbortController();
    if (lease !== undefined) this.leases.set(ac, lease);
    let set = this.running.get(taskId);
    if (!set) this.running.set(taskId, (set = new Set()));
    set.add(ac);
    return ac;
  }

  unregister(taskId: string, ac: AbortController): void {
    const set = this.running.get(taskId);
    set?.delete(ac);
    if (set?.size === 0) {
      this.running.delete(taskId);
      this.checks.delete(taskId);
    }
  }

  /** Calls `onSteer` for each immediate steer of the session until the returned function is called. */
  watchSteering(sessionId: string, onSteer: () => void): () => void {
    let set = this.steerWatchers.get(sessionId);
    if (!set) this.steerWatchers.set(sessionId, (set = new Set()));
    set.add(onSteer);
    return () => {
      set.delete(onSteer);
      if (set.size === 0) this.steerWatchers.delete(sessionId);
    };
  }

  private steer(sessionId: string): void {
    for (const onSteer of this.steerWatchers.get(sessionId) ?? []) onSteer();
  }

  /** Aborts the loops of `taskId`; with `lease`, only the loop of the turn holding it. */
  abortTask(taskId: string, cause: AbortCause, lease?: string): void {
    for (const ac of this.running.get(taskId) ?? []) if (lease === undefined || this.leases.get(ac) === lease) ac.abort(cause);
  }

  abortAll(cause: AbortCause): void {
    for (const taskId of this.running.keys()) this.abortTask(taskId, cause);
  }

  size(): number {
    let n = 0;
    for (const set of this.running.values()) n += set.size;
    return n;
  }
}
