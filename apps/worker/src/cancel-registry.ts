import type { Redis } from 'ioredis';

/** Why a running agent loop was aborted; decides what (if anything) the processor records. */
export type AbortCause = 'cancelled' | 'shutdown' | 'lease_lost';

/**
 * The running loops of this process by task, so a cancel published by any gateway reaches them within
 * milliseconds (BullMQ's cancelJob only reaches the worker it is called on). The durable half of cancel is the
 * task's status: every event append checks it, so a loop that missed the message stops at its next write.
 */
export class CancelRegistry {
  private readonly running = new Map<string, Set<AbortController>>();

  async listen(subscriber: Redis, channel: string): Promise<void> {
    subscriber.on('message', (_channel: string, taskId: string) => this.abortTask(taskId, 'cancelled'));
    await subscriber.subscribe(channel);
  }

  register(taskId: string): AbortController {
    const ac = new AbortController();
    let set = this.running.get(taskId);
    if (!set) this.running.set(taskId, (set = new Set()));
    set.add(ac);
    return ac;
  }

  unregister(taskId: string, ac: AbortController): void {
    const set = this.running.get(taskId);
    set?.delete(ac);
    if (set?.size === 0) this.running.delete(taskId);
  }

  abortTask(taskId: string, cause: AbortCause): void {
    for (const ac of this.running.get(taskId) ?? []) ac.abort(cause);
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
