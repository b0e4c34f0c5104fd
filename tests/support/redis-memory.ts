// Tests of what Cadre does when Redis refuses writes for want of memory (maxmemory reached under noeviction).
import { Queue } from 'bullmq';
import { AGENT_QUEUE, KeyBuilder } from '@cadre/store';
import type { TestRedisClient } from '@cadre/testing';
import { TestStack, type StackOptions } from './stack.ts';

/** A stack, an admin connection to its Redis and its agent queue (BullMQ's view of the jobs). */
export interface AdminStack {
  stack: TestStack;
  admin: TestRedisClient;
  queue: Queue;
  /** Lifts any memory limit, then closes the queue, the connection and the stack. */
  stop(): Promise<void>;
}

export async function startAdminStack(opts: StackOptions = {}): Promise<AdminStack> {
  const stack = await TestStack.start(opts);
  const admin = stack.redis.connect();
  const queue = new Queue(AGENT_QUEUE, { connection: admin, prefix: new KeyBuilder(stack.prefix).bullPrefix() });
  return {
    stack, admin, queue,
    async stop() {
      await admin.config('SET', 'maxmemory', '0');
      await queue.close();
      admin.disconnect();
      await stack.stop();
    },
  };
}

/** Redis refuses every write that needs memory (OOM), as with maxmemory reached under noeviction, until `restore`. */
export async function refuseWritesForMemory(admin: TestRedisClient): Promise<{ restore: () => Promise<unknown> }> {
  const used = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))![1]);
  await admin.config('SET', 'maxmemory-policy', 'noeviction');
  await admin.config('SET', 'maxmemory', String(Math.floor(used / 2)));
  return { restore: () => admin.config('SET', 'maxmemory', '0') };
}

/** Replies Redis has refused with OOM since it started (INFO errorstats). */
export async function oomErrors(admin: TestRedisClient): Promise<number> {
  return Number(/errorstat_OOM:count=(\d+)/.exec(await admin.info('errorstats'))?.[1] ?? 0);
}
