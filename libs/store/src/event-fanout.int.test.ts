import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TeamEvent } from '@cadre/protocol';
import { Redis } from 'ioredis';
import { startRestartableRedis, startTestRedis, waitUntil, type TestRedis, type TestRedisClient } from '@cadre/testing';
import { EventFanout, WatchClosedError, type LoggedEvent, type LogWatcher, type WatchableLog } from './event-fanout.ts';
import { ApprovalStore, type ApprovalRecord } from './approval-store.ts';
import { connectRedis } from './connect.ts';
import { KeyBuilder } from './keys.ts';
import { RunStore } from './run-store.ts';
import { SessionStore } from './session-store.ts';
import { TaskStore } from './task-store.ts';

let server: TestRedis;
let redis: TestRedisClient;
let store: TaskStore;
let fanout: EventFanout;

beforeAll(async () => {
  server = await startTestRedis();
  redis = server.connect();
  store = new TaskStore({ redis, keys: new KeyBuilder('fanout') });
  // No safety polls during the test, so every tail read is caused by an append notification.
  fanout = new EventFanout({ keys: store.keys, subscriber: connectRedis(server.target, 'fanout-test-sub', { shardedSubscriber: true }), watcherBufferLimit: 16, safetyPollMs: 60_000 });
  await fanout.start();
});
afterAll(async () => {
  await fanout?.close();
  redis?.disconnect();
  await server?.stop();
});

async function liveTask(): Promise<string> {
  const team = { lead: { instructions: 'l' }, workers: [], max_workers: 1 };
  const { task } = await store.createTask({ workspace_id: 'w', goal: 'g', team, metadata: {} });
  await store.claimWorker(task.task_id, 'lead', 'lease', 'host');
  return task.task_id;
}

const phase = (taskId: string, turn: number) => store.appendWorkerEvent(taskId, 'lead', 'lease', 'worker_phase', { phase: 'thinking', mode: 'react', turn });

/** Events pushed to `watcher` that its reader has not taken yet (white-box: the pipe's pause is not observable otherwise). */
const watcherHolds = (watcher: LogWatcher<TeamEvent>, n: number): boolean => (watcher as unknown as { live: unknown[] }).live.length >= n;
const watcherWaits = (watcher: LogWatcher<TeamEvent>): boolean => (watcher as unknown as { wakeReader?: unknown }).wakeReader !== undefined;

async function collect(watcher: LogWatcher<TeamEvent>, count: number): Promise<number[]> {
  const seqs: number[] = [];
  for await (const e of watcher) {
    seqs.push(e.seq);
    if (seqs.length === count) break;
  }
  return seqs;
}

describe('EventFanout', () => {
  it('hears only the logs it watches: one shard channel per watched log, left when its last watcher goes', async () => {
    const watchedId = await liveTask();
    const otherId = await liveTask();
    expect(fanout.subscribedChannels()).toBe(0);
    const heardBefore = fanout.appendsSeen;
    const watcher = await fanout.watch(store.taskLog(watchedId), 2);
    expect(fanout.subscribedChannels()).toBe(1);
    const received = collect(watcher, 4);
    for (let turn = 1; turn <= 5; turn++) await phase(otherId, turn);
    for (let turn = 1; turn <= 3; turn++) await phase(watchedId, turn);
    while (fanout.appendsSeen - heardBefore < 3) await new Promise((r) => setTimeout(r, 5));
    await phase(watchedId, 4);
    expect(await received).toEqual([3, 4, 5, 6]);
    while (fanout.appendsSeen - heardBefore < 4) await new Promise((r) => setTimeout(r, 5));
    // The four appends of the watched task, none of the five of the other one.
    expect(fanout.appendsSeen - heardBefore).toBe(4);
    expect(fanout.subscribedChannels()).toBe(0);
    // The SUNSUBSCRIBE is sent as the last watcher goes, not awaited: Redis hears it a moment later.
    await waitUntil('Redis to see the shard channel left', async () => {
      const [, subscribers] = (await redis.call('PUBSUB', 'SHARDNUMSUB', store.keys.taskAppended(watchedId))) as [string, number];
      return subscribers === 0;
    });
  });

  it('shares one tail among watchers: Redis reads follow appends, not watchers', async () => {
    const taskId = await liveTask();
    const watchers = await Promise.all(Array.from({ length: 20 }, () => fanout.watch(store.taskLog(taskId), 0)));
    const received = watchers.map((w) => collect(w, 2 + 40));
    const readsBefore = fanout.tailReads;
    for (let turn = 1; turn <= 40; turn++) await phase(taskId, turn);
    const all = await Promise.all(received);
    for (const seqs of all) expect(seqs).toEqual(Array.from({ length: 42 }, (_, i) => i + 1));
    // At most one read per append (notifications that arrive mid-read are coalesced); 20 watchers reading
    // for themselves would be 800.
    expect(fanout.tailReads - readsBefore).toBeLessThanOrEqual(40);
    expect(fanout.watcherCount()).toBe(0);
  });

  it('closes a stalled watcher with a resumable error and keeps serving the others', async () => {
    const taskId = await liveTask();
    const stalled = await fanout.watch(store.taskLog(taskId), 0);
    const healthy = await fanout.watch(store.taskLog(taskId), 0);
    const first = await stalled.next();
    expect((first.value as TeamEvent).seq).toBe(1);
    const healthyDone = collect(healthy, 2 + 60);
    const failures: Error[] = [];
    stalled.onFailure((err) => failures.push(err));
    for (let turn = 1; turn <= 60; turn++) await phase(taskId, turn);
    expect(await healthyDone).toHaveLength(62);
    // The stalled watcher was told and let go at once, before its reader came back.
    expect(failures).toHaveLength(1);
    expect(fanout.watcherCount()).toBe(0);

    let error: unknown;
    try {
      while (!(await stalled.next()).done);
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(WatchClosedError);
    expect(error).toMatchObject({ code: 'watcher_overflow' });
    const resumeFrom = (error as WatchClosedError).lastSeq;
    expect(resumeFrom).toBeGreaterThanOrEqual(1);
    // Resuming from the reported cursor yields the rest with no gap.
    const resumed = await fanout.watch(store.taskLog(taskId), resumeFrom);
    expect(await collect(resumed, 62 - resumeFrom)).toEqual(Array.from({ length: 62 - resumeFrom }, (_, i) => resumeFrom + 1 + i));
  });

  it('pipes every event to a writer in order; a writer that is full pauses it until writable, and nothing is lost', async () => {
    const taskId = await liveTask();
    const watcher = await fanout.watch(store.taskLog(taskId), 0);
    const written: number[] = [];
    let drained: (() => void) | undefined;
    const piped = watcher.pipeTo(
      (e) => {
        written.push(e.seq);
        return e.seq !== 4 && e.seq !== 6; // the stream is full after events 4 and 6
      },
      () => new Promise<void>((resolve) => (drained = resolve)),
    );
    for (let turn = 1; turn <= 5; turn++) await phase(taskId, turn);
    await waitUntil('events 5..7 to be pushed while the writer is full', () => watcherHolds(watcher, 3));
    expect(written).toEqual([1, 2, 3, 4]);
    drained!();
    // Resumed with the held events: full again after 6, 7 still waits.
    await waitUntil('the second pause', () => written.includes(6));
    expect(written).toEqual([1, 2, 3, 4, 5, 6]);
    drained!();
    const usage = { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 };
    await store.finishWorker(taskId, 'lead', 'lease', { outcome: 'completed', result: 'r', usage }, { status: 'completed', result: 'r', usage });
    await piped;
    expect(written).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(watcher.lastSeq).toBe(10);
    expect(fanout.watcherCount()).toBe(0);
  });

  /** An own fan-out whose lag reports are recorded (live: the tail's, caught-up watchers; late: from buffers), on a fresh live task. */
  async function lagReporting(subscriberName: string) {
    const live: number[] = [];
    const late: number[] = [];
    const own = new EventFanout({
      keys: store.keys, subscriber: connectRedis(server.target, subscriberName, { shardedSubscriber: true }), safetyPollMs: 60_000,
      onLiveDelivery: (e) => live.push(e.seq),
      onLateDelivery: (e) => late.push(e.seq),
    });
    await own.start();
    const taskId = await liveTask();
    const log = store.taskLog(taskId);
    return { own, live, late, taskId, log, head: await log.head() };
  }

  it('reports a live event once per tail when it is written straight to the caught-up watchers, and a late batch from a full stream\'s buffer once, apart', async () => {
    const { own, live, late, taskId, log, head } = await lagReporting('fanout-test-sub-2');
    const watchers = await Promise.all([0, 1, 2].map(() => own.watch(log, head)));
    const written: number[][] = [[], [], []];
    let drained: (() => void) | undefined;
    const warm = head + 1;
    const piped = watchers.map((w, i) => w.pipeTo(
      (e) => {
        written[i]!.push(e.seq);
        return i !== 2 || e.seq !== warm + 1; // the third stream is full after the first event past the warm-up
      },
      () => new Promise<void>((resolve) => (drained = resolve)),
    ));
    await phase(taskId, 1);
    await waitUntil('every watcher to have the warm-up event', () => written.every((w) => w.includes(warm)));
    live.length = 0;
    for (let turn = 2; turn <= 4; turn++) await phase(taskId, turn);
    await waitUntil('the full stream to hold two events', () => watcherHolds(watchers[2]!, 2));
    await waitUntil('the others to have all three', () => written[0]!.length === 4 && written[1]!.length === 4);
    // Each event once, as the tail wrote it to the streams that took it at once; not once per watcher.
    expect(live).toEqual([warm + 1, warm + 2, warm + 3]);
    expect(late).toEqual([]);
    drained!();
    await waitUntil('the full stream to take what it held', () => written[2]!.length === 4);
    // The two it took late from its buffer, written as one batch: reported once, by its oldest event, as late only.
    expect(late).toEqual([warm + 2]);
    expect(live).toEqual([warm + 1, warm + 2, warm + 3]);
    expect(written).toEqual([0, 1, 2].map(() => [warm, warm + 1, warm + 2, warm + 3]));
    await Promise.all(watchers.map((w) => w.return()));
    await Promise.all(piped);
    await own.close();
  });

  it('reports an event a waiting for-await reader is woken with as caught up, and each event a busy one takes from its buffer as late', async () => {
    const { own, live, late, taskId, log, head } = await lagReporting('fanout-test-sub-3');
    const watcher = await own.watch(log, head);
    const waiting = nextSeqs(watcher, 1);
    await waitUntil('the reader to wait for a push', () => watcherWaits(watcher));
    await phase(taskId, 1);
    expect(await waiting).toEqual([head + 1]);
    expect(live).toEqual([head + 1]);
    expect(late).toEqual([]);
    // Not reading: the next two wait in its buffer, and each is reported late as the reader takes it.
    for (let turn = 2; turn <= 3; turn++) await phase(taskId, turn);
    await waitUntil('the buffer to hold two events', () => watcherHolds(watcher, 2));
    expect(await nextSeqs(watcher, 2)).toEqual([head + 2, head + 3]);
    expect(late).toEqual([head + 2, head + 3]);
    expect(live).toEqual([head + 1]);
    await watcher.return();
    await own.close();
  });

  it('pages through a history longer than a page, on a finished log, and ends', async () => {
    const paged = new EventFanout({ keys: store.keys, subscriber: connectRedis(server.target, 'fanout-test-sub', { shardedSubscriber: true }), pageSize: 5, safetyPollMs: 60_000 });
    await paged.start();
    try {
      const taskId = await liveTask();
      for (let turn = 1; turn <= 20; turn++) await phase(taskId, turn);
      await store.finishWorker(taskId, 'lead', 'lease', { outcome: 'completed', result: 'r', usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }, { status: 'completed', result: 'r', usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
      for (const after of [0, 3, 12]) {
        const seqs: number[] = [];
        for await (const e of await paged.watch(store.taskLog(taskId), after)) seqs.push(e.seq);
        expect(seqs).toEqual(Array.from({ length: 25 - after }, (_, i) => after + 1 + i));
      }
    } finally {
      await paged.close();
    }
  });

  it("serves a watcher's catch-up from the tail's kept page when it holds the next event; before the page, from the log", async () => {
    const paged = new EventFanout({ keys: store.keys, subscriber: connectRedis(server.target, 'fanout-test-sub', { shardedSubscriber: true }), pageSize: 4, safetyPollMs: 60_000 });
    await paged.start();
    try {
      const taskId = await liveTask();
      for (let turn = 1; turn <= 2; turn++) await phase(taskId, turn);
      // The log as the watchers see it, counting their own reads of it (the tail's are counted by tailReads).
      let logReads = 0;
      const log = { ...store.taskLog(taskId), read: (after: number, limit: number) => (logReads++, store.taskLog(taskId).read(after, limit)) };
      // The first watcher's catch-up (seq 1..4) comes with the tail's start: one read of head and page together.
      const tailReadsBefore = paged.tailReads;
      const first = await paged.watch(log, 0);
      expect(paged.tailReads - tailReadsBefore).toBe(1);
      // A watcher at the tail's head has nothing to catch up: no read either. It keeps the tail alive below.
      const keeper = await paged.watch(log, 4);
      expect(await collect(first, 4)).toEqual([1, 2, 3, 4]);
      expect(logReads).toBe(0);

      // Live events the tail pushed are kept too: a watcher joining at seq 2 starts from memory, in order.
      const kept = nextSeqs(keeper, 3);
      for (let turn = 3; turn <= 5; turn++) await phase(taskId, turn);
      expect(await kept).toEqual([5, 6, 7]);
      const joining = await paged.watch(log, 2);
      expect(await collect(joining, 5)).toEqual([3, 4, 5, 6, 7]);
      expect(logReads).toBe(0);

      // The kept page is bounded (pageSize 4, trimmed at 8): after more appends, seq 1 is no longer in it, so a
      // watcher from 0 reads the log, and still gets every event once, in order.
      const more = nextSeqs(keeper, 6);
      for (let turn = 6; turn <= 11; turn++) await phase(taskId, turn);
      expect(await more).toEqual([8, 9, 10, 11, 12, 13]);
      const fromStart = await paged.watch(log, 0);
      expect(await collect(fromStart, 13)).toEqual(Array.from({ length: 13 }, (_, i) => i + 1));
      expect(logReads).toBeGreaterThan(0);
      await keeper.return();
    } finally {
      await paged.close();
    }
  });

  it('lets go of a watcher whose cursor is older than the retained log', async () => {
    const trimmed = new TaskStore({ redis, keys: new KeyBuilder('fanout-trim'), maxEventsPerTask: 100 });
    const team = { lead: { instructions: 'l' }, workers: [], max_workers: 1 };
    const { task } = await trimmed.createTask({ workspace_id: 'w', goal: 'g', team, metadata: {} });
    await trimmed.claimWorker(task.task_id, 'lead', 'lease', 'host');
    for (let turn = 1; turn <= 120; turn++) await trimmed.appendWorkerEvent(task.task_id, 'lead', 'lease', 'worker_phase', { phase: 'thinking', mode: 'react', turn });
    const watcher = await fanout.watch(trimmed.taskLog(task.task_id), 0);
    await expect(watcher.next()).rejects.toMatchObject({ code: 'cursor_expired' });
    expect(fanout.watcherCount()).toBe(0);
  });

  it('logs a failing tail read once per outage, with its log and cursor, and says when it reads again', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const logger = {
      warn: (obj: object, msg: string) => void lines.push({ level: 'warn', ...obj, msg }),
      info: (obj: object, msg: string) => void lines.push({ level: 'info', ...obj, msg }),
    };
    // A short safety poll: the tail keeps retrying on its own, so the outage spans many failed reads.
    const logged = new EventFanout({ keys: store.keys, subscriber: connectRedis(server.target, 'fanout-test-sub', { shardedSubscriber: true }), safetyPollMs: 20, logger });
    await logged.start();
    try {
      const taskId = await liveTask();
      const watcher = await logged.watch(store.taskLog(taskId), 0);
      const events = store.keys.task(taskId).events;
      // Break the log for real: the tail's XRANGE now answers WRONGTYPE, on every poll.
      await redis.rename(events, `${events}:aside`);
      await redis.set(events, 'not a stream');
      const reads = logged.tailReads;
      await until(() => logged.tailReads >= reads + 5 && lines.length > 0);
      // Mend it in one step (a poll between a DEL and a RENAME would read a missing stream and succeed early,
      // at the old cursor) and append: a later read succeeds.
      await redis.multi().del(events).rename(`${events}:aside`, events).exec();
      await phase(taskId, 1);
      await until(() => lines.some((l) => l.level === 'info'));
      expect(lines).toEqual([
        expect.objectContaining({ level: 'warn', msg: 'event tail read failed; retrying on the safety poll', logId: taskId, cursor: 2, watchers: 1, err: expect.stringContaining('WRONGTYPE') }),
        expect.objectContaining({ level: 'info', msg: 'event tail reads again', logId: taskId }),
      ]);
      // The first read that succeeds may be a safety poll between the mend and the append (cursor 2) or one after it.
      expect([2, 3]).toContain(lines[1]!.cursor);
      expect(lines[1]!.failedReads).toBeGreaterThanOrEqual(4);
      // The watcher never noticed: it gets every event in order.
      expect(await collect(watcher, 3)).toEqual([1, 2, 3]);
    } finally {
      await logged.close();
    }
  });

  it('pushes live appends to a caught-up tail from their notifications: every kind of log, no read, the bytes its read gives', async () => {
    const keys = store.keys;
    const sessions = new SessionStore({ redis, keys });
    const runs = new RunStore({ redis, keys });
    const approvals = new ApprovalStore({ redis, keys });
    const taskId = await liveTask();
    const session = await sessions.createSession({ workspace_id: 'w', model: 'm', tools: [], transcript: [], project_context: [], system_context: '', max_context_tokens: 1000, approval_policy: [], stop_on_denial: false });
    const { run } = await runs.createRun({ workspace_id: 'w', agent_id: null, query: 'q', requested_by: null, files: [], metadata: {} }, 10);
    const record = (n: number): ApprovalRecord => ({
      approval_id: `t-${n}`, workspace_id: 'w', task_id: 't', worker_id: 'lead', call_id: `c${n}`, tool_name: 'shell', arguments: '{"cmd":"ls \\u00e9"}',
      reason: 'asks', timeout_secs: 60, status: 'pending', created_at: 1, expires_at: Date.now() + 60_000,
    });
    const cases: Array<{ log: WatchableLog<LoggedEvent>; append: () => Promise<unknown> }> = [
      { log: store.taskLog(taskId), append: async () => { for (let turn = 1; turn <= 3; turn++) await phase(taskId, turn); } },
      { log: sessions.sessionLog(session.session_id), append: () => sessions.startTurn(session.session_id, { message_id: 'm1', content: 'héllo "quoted"\nline' }) },
      { log: runs.runLog(run.run_id, 'w'), append: async () => { await runs.control(run.run_id, 'pause', undefined, 'op'); await runs.control(run.run_id, 'resume', undefined, 'op'); } },
      { log: approvals.inboxLog('w'), append: () => approvals.announce('w', 'approval_requested', [record(1), record(2)]) },
    ];
    for (const { log, append } of cases) {
      const head = await log.head();
      const watcher = await fanout.watch(log, head);
      const [reads, carried] = [fanout.tailReads, fanout.entriesCarried];
      await append();
      const appended = (await log.head()) - head;
      expect(appended).toBeGreaterThan(0);
      const pushed = await nextEvents(watcher, appended);
      await watcher.return();
      expect(fanout.tailReads - reads).toBe(0);
      expect(fanout.entriesCarried - carried).toBe(appended);
      expect(JSON.stringify(pushed)).toBe(JSON.stringify(await log.read(head, appended)));
    }
  });

  it('reads the log after a lost notification: the gap and what follows arrive in order, once, with one read', async () => {
    const taskId = await liveTask();
    const watcher = await fanout.watch(store.taskLog(taskId), 2);
    await phase(taskId, 1);
    expect(await nextSeqs(watcher, 1)).toEqual([3]);
    // An append whose notification never arrived (a dropped connection's): in the log, announced to nobody.
    const k = store.keys.task(taskId);
    const seq = await redis.hincrby(k.meta, 'seq', 1);
    await redis.xadd(k.events, `${seq}-0`, 'ts', Date.now(), 't', 'worker_phase', 'w', 'lead', 'a', 0, 'p', JSON.stringify({ phase: 'thinking', mode: 'react', turn: 2 }));
    const reads = fanout.tailReads;
    await phase(taskId, 3);
    expect(await nextSeqs(watcher, 2)).toEqual([4, 5]);
    expect(fanout.tailReads - reads).toBe(1);
    // Caught up again: the next appends come with their notifications.
    for (let turn = 4; turn <= 6; turn++) await phase(taskId, turn);
    expect(await nextSeqs(watcher, 3)).toEqual([6, 7, 8]);
    expect(fanout.tailReads - reads).toBe(1);
    await watcher.return();
  });

  it('reads an entry with a NUL in a value (a VM may relay any source) from the log: its notification is the header alone', async () => {
    const runs = new RunStore({ redis, keys: store.keys });
    const { run } = await runs.createRun({ workspace_id: 'w-nul', agent_id: null, query: 'q', requested_by: null, files: [], metadata: {} }, 10);
    const log = runs.runLog(run.run_id, 'w-nul');
    const head = await log.head();
    const watcher = await fanout.watch(log, head);
    const [reads, carried] = [fanout.tailReads, fanout.entriesCarried];
    await runs.relay(run.run_id, undefined, undefined, [{ event_type: 'message', source: 'vm\0agent', payload: { text: 'hi' } }]);
    const [event] = await nextEvents(watcher, 1);
    await watcher.return();
    expect(event).toMatchObject({ seq: head + 1, event_type: 'message', source: 'vm\0agent', payload: { text: 'hi' } });
    expect([fanout.tailReads - reads, fanout.entriesCarried - carried]).toEqual([1, 0]);
  });

  it('reads an entry too big for its notification from the log, and takes the next small one from its own', async () => {
    const taskId = await liveTask();
    const watcher = await fanout.watch(store.taskLog(taskId), 2);
    const reads = fanout.tailReads;
    const big = 'x'.repeat(20_000);
    await store.appendWorkerEvent(taskId, 'lead', 'lease', 'worker_tool_call', { tool: 'write', call_id: 'c1', arguments: big });
    const [bigEvent] = await nextEvents(watcher, 1);
    expect(bigEvent).toMatchObject({ seq: 3, event_type: 'worker_tool_call', payload: { arguments: big } });
    expect(fanout.tailReads - reads).toBe(1);
    await phase(taskId, 1);
    expect(await nextSeqs(watcher, 1)).toEqual([4]);
    expect(fanout.tailReads - reads).toBe(1);
    await watcher.return();
  });
});

describe('a watched log that vanishes', () => {
  const sessions = () => new SessionStore({ redis, keys: store.keys });
  const runs = () => new RunStore({ redis, keys: store.keys });
  const newSession = () => sessions().createSession({ workspace_id: 'w', model: 'm', tools: [], transcript: [], project_context: [], system_context: '', max_context_tokens: 1000, approval_policy: [], stop_on_denial: false });
  const newRun = async () => (await runs().createRun({ workspace_id: 'w', agent_id: null, query: 'q', requested_by: null, files: [], metadata: {} }, 10)).run;

  it('ends every watcher of a task, session or run log whose keys are deleted with log_gone, on the next safety poll, and lets its tail go', async () => {
    const polled = new EventFanout({ keys: store.keys, subscriber: connectRedis(server.target, 'fanout-test-sub', { shardedSubscriber: true }), safetyPollMs: 20 });
    await polled.start();
    try {
      const taskId = await liveTask();
      const session = await newSession();
      const run = await newRun();
      const cases: Array<{ log: WatchableLog<LoggedEvent>; keys: { meta: string; events: string } }> = [
        { log: store.taskLog(taskId), keys: store.keys.task(taskId) },
        { log: sessions().sessionLog(session.session_id), keys: store.keys.session(session.session_id) },
        { log: runs().runLog(run.run_id, 'w'), keys: store.keys.run('w', run.run_id) },
      ];
      for (const { log, keys } of cases) {
        const head = await log.head();
        // One reader iterating, one piping: both are ended.
        const iterated = await polled.watch(log, head);
        const piped = await polled.watch(log, head);
        const iterating = iterated.next();
        const piping = piped.pipeTo(() => true, async () => undefined);
        const reads = polled.tailReads;
        await redis.del(keys.meta, keys.events);
        for (const ending of [iterating, piping]) {
          const error = await ending.then(() => 'ended without an error', (err: unknown) => err);
          expect(error).toBeInstanceOf(WatchClosedError);
          expect(error).toMatchObject({ code: 'log_gone', lastSeq: head, message: expect.stringContaining(log.id) });
        }
        // The poll in flight at the DEL may still have found the log; the one after it did not.
        expect(polled.tailReads - reads).toBeLessThanOrEqual(2);
        expect(polled.watcherCount()).toBe(0);
        expect(polled.subscribedChannels()).toBe(0);
        // A new watch of it is refused at once by its new tail's start, not left waiting either.
        await expect(polled.watch(log, head)).rejects.toMatchObject({ code: 'log_gone' });
        expect(polled.subscribedChannels()).toBe(0);
      }
    } finally {
      await polled.close();
    }
  });

  it("ends a watcher whose own catch-up read finds the log gone before its tail's safety poll has run", async () => {
    const taskId = await liveTask();
    const log = store.taskLog(taskId);
    const head = await log.head();
    // The first watcher starts the tail at the head; the second starts before it, so it reads the log itself.
    const atHead = await fanout.watch(log, head);
    const waiting = atHead.next();
    await redis.del(store.keys.task(taskId).meta, store.keys.task(taskId).events);
    const behind = await fanout.watch(log, 0);
    await expect(behind.next()).rejects.toMatchObject({ code: 'log_gone', lastSeq: 0 });
    // The tail (60 s between polls here) has not looked yet: the first watcher still waits, until it goes.
    expect(fanout.watcherCount()).toBe(1);
    await atHead.return();
    expect(await waiting).toEqual({ done: true, value: undefined });
  });

  it('keeps the watchers of a log its tail cannot read because Redis is stopped, and delivers what follows once it is back', async () => {
    const outage = await startRestartableRedis();
    // Fails a command at once while Redis is away (the default queues it until it is back): each poll fails.
    const failFast = new Redis(outage.url, { enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    failFast.on('error', () => undefined);
    await waitUntil('the store to connect', () => failFast.status === 'ready');
    const tasks = new TaskStore({ redis: failFast, keys: new KeyBuilder('outage') });
    const failures: string[] = [];
    const logger = { warn: (_obj: object, msg: string) => void failures.push(msg), info: () => undefined };
    const polled = new EventFanout({ keys: tasks.keys, subscriber: connectRedis(outage.target, 'fanout-outage-sub', { shardedSubscriber: true }), safetyPollMs: 20, logger });
    await polled.start();
    try {
      const team = { lead: { instructions: 'l' }, workers: [], max_workers: 1 };
      const { task } = await tasks.createTask({ workspace_id: 'w', goal: 'g', team, metadata: {} });
      await tasks.claimWorker(task.task_id, 'lead', 'lease', 'host');
      const log = tasks.taskLog(task.task_id);
      const head = await log.head();
      const watcher = await polled.watch(log, head);
      const next = watcher.next();
      outage.kill();
      const reads = polled.tailReads;
      // Several polls that found no Redis at all (not a Redis that said the log is missing).
      await until(() => polled.tailReads >= reads + 5 && failures.length > 0);
      expect(polled.watcherCount()).toBe(1);
      await outage.restart();
      await waitUntil('the store to reconnect', () => failFast.status === 'ready');
      await tasks.appendWorkerEvent(task.task_id, 'lead', 'lease', 'worker_phase', { phase: 'thinking', mode: 'react', turn: 1 });
      expect(await next).toMatchObject({ done: false, value: { seq: head + 1 } });
      await watcher.return();
    } finally {
      await polled.close();
      failFast.disconnect();
      await outage.stop();
    }
  });
});

/** The next `count` events, leaving the watcher open. */
async function nextEvents<E extends LoggedEvent>(watcher: LogWatcher<E>, count: number): Promise<E[]> {
  const events: E[] = [];
  while (events.length < count) events.push((await watcher.next()).value as E);
  return events;
}

/** The next `count` events' seqs, leaving the watcher open (collect's break would end it). */
async function nextSeqs(watcher: LogWatcher<TeamEvent>, count: number): Promise<number[]> {
  const seqs: number[] = [];
  while (seqs.length < count) seqs.push(((await watcher.next()).value as TeamEvent).seq);
  return seqs;
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 5));
}
