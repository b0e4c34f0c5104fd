// A hand-back is counted once its job is back in the queue, not when it is tried.
import { Queue, WaitingError, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import pino from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestRedis, type TestRedis } from '@cadre/testing';
import { rideOutOutage, type OutageRide } from './hand-back.ts';

const log = pino({ level: 'silent' });
let server: TestRedis;
let redis: Redis;
let queue: Queue<{ outages?: number }>;
let worker: Worker<{ outages?: number }>;

beforeAll(async () => {
  server = await startTestRedis();
  redis = new Redis(server.url, { maxRetriesPerRequest: null });
  queue = new Queue('hand-back', { connection: redis });
  // Jobs are taken by hand (getNextJob), so the test holds each one's lock token.
  worker = new Worker('hand-back', null, { connection: redis.duplicate(), autorun: false });
});
afterAll(async () => {
  await worker?.close();
  await queue?.close();
  await redis?.quit();
  await server?.stop();
});

function ride(over: Partial<OutageRide>): OutageRide {
  const never = new Promise(() => undefined);
  return { err: new Error('READONLY'), maxAttempts: 3, waitMs: 300, signal: new AbortController().signal, log, release: () => never, giveUp: () => never, ...over };
}

it('counts a job handed back once its moveToWait succeeded', async () => {
  await queue.add('job', {});
  const job = (await worker.getNextJob('token-1'))!;
  let handedBack = 0;
  await expect(rideOutOutage(job, 'token-1', ride({ release: async () => undefined, onHandedBack: () => handedBack++ }))).rejects.toBeInstanceOf(WaitingError);
  expect(await job.getState()).toBe('waiting');
  expect(handedBack).toBe(1);
});

it('does not count a hand-back Redis never answered: the stall check has the job, not the queue', async () => {
  await queue.add('job', {});
  const job = (await worker.getNextJob('token-2'))!;
  let handedBack = 0;
  // The release write never answers: the hand-back gives up after waitMs and leaves the job active.
  await expect(rideOutOutage(job, 'token-2', ride({ onHandedBack: () => handedBack++ }))).rejects.toBeInstanceOf(WaitingError);
  expect(await job.getState()).toBe('active');
  expect(handedBack).toBe(0);
});
