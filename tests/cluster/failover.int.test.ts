// A master of the Redis Cluster dies (kill -9) while team tasks run and are watched: its replica takes over, and
// every task still ends, each log contiguous, and every watcher (resuming after an error
// with its last seq, as a client does) has seen each event exactly once. The tests start Redis servers of their own,
// since they kill masters.
//
// Redis replicates asynchronously: a write the master acknowledged but had not yet sent to its replica is gone
// after the failover. The in-sync tests take that out of the picture (writes paused and the replica caught up
// before the kill) to check what the code guarantees; the other kills the master with writes in flight and reports
// what the watchers saw that the surviving log does not hold. Last, the same team tasks through Sentinel.
import { status as GrpcStatus } from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import type { TeamEventProto } from '@cadre/protocol';
import { AGENT_QUEUE, KeyBuilder, agentJobId } from '@cadre/store';
import { assertContiguous, grpcClient, httpClient, pollUntilTerminal, startTestCluster, startTestSentinel, waitForEvent, watchTeam, type TestCluster, type TestRedis } from '@cadre/testing';
import { Scrape } from '../support/prometheus.ts';
import { TestStack } from '../support/stack.ts';

const TASKS = 6;
/** The measured test: many short turns, so appends are in flight when the master dies. */
const BUSY_TASKS = 12;
const TERMINAL = new Set(['task_completed', 'task_failed', 'task_cancelled']);
/**
 * A task whose jobs a failover lost is re-driven by the gateway's task reconciler (a pass every second) or, when its
 * listing was lost too, by read repair (the test polls every task): both well within finalLogs' 90 s.
 */
const RECONCILE_ENV = { CADRE_ENQUEUE_GRACE_MS: '2000', CADRE_TASK_RECONCILE_INTERVAL_MS: '1000' };
let stack: TestStack | undefined;
/**
 * The servers a test started, stopped after it: a cluster left running beside the next test's (its nodes still
 * gossiping, a killed master's port held) is not what that test is about.
 */
const servers: { stop(): Promise<void> }[] = [];
const started = async <T extends { stop(): Promise<void> }>(server: Promise<T>): Promise<T> => {
  servers.push(await server);
  return servers.at(-1) as T;
};

afterEach(async () => {
  await stack?.stop();
  stack = undefined;
  await Promise.all(servers.splice(0).map((server) => server.stop()));
}, 90_000);

interface Watched {
  events: TeamEventProto[];
  resumes: number;
  /**
   * Set when the watch ended without its task's end: a resume refused (a cursor past the log's end: the log lost
   * events the watcher had seen), or NOT_FOUND (a task Redis lost: the watch open at the loss ends so too).
   */
  refused?: { code: number; details: string };
}

/**
 * Watches a task to its end over gRPC WatchTeam into `watched`, resuming after an error from the last seq it
 * received, as a client does; gives up when the gateway refuses the cursor or says the task is gone.
 */
async function watchToEnd(target: string, taskId: string, watched: Watched): Promise<Watched> {
  const client = grpcClient(target);
  try {
    while (!watched.events.some((e) => TERMINAL.has(e.eventType))) {
      const afterSeq = watched.events.at(-1)?.seq ?? 0;
      const { events: more, status } = await watchTeam(client, { taskId, afterSeq });
      watched.events.push(...more);
      if (TERMINAL.has(more.at(-1)?.eventType ?? '')) break;
      if (/cursor/i.test(status.details ?? '') || status.code === GrpcStatus.NOT_FOUND) {
        watched.refused = { code: status.code, details: status.details ?? '' };
        break;
      }
      watched.resumes++;
      await new Promise((r) => setTimeout(r, 200));
    }
  } finally {
    client.close();
  }
  return watched;
}

/**
 * Starts team tasks (two workers, then the lead) that take `answerMs` per model answer, watched from the start;
 * resolves once every worker of every task has started, or (`firstOnly`) those of the first task: on a loaded
 * machine the first tasks of a busy batch can end before the last one's workers get a slot.
 */
async function startTasks(redis: TestRedis, count: number, answerMs: number, firstOnly = false): Promise<{ taskIds: string[]; watches: Promise<Watched>[]; watching: Watched[] }> {
  stack = await TestStack.start({ redis, workers: 2, env: RECONCILE_ENV });
  const taskIds: string[] = [];
  for (let i = 0; i < count; i++) {
    const res = await fetch(`${stack.url}/api/tasks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${'test-key-all-workspaces'}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        workspace_id: 'failover',
        goal: `Task ${i} [[scripted:delay=${answerMs}]]`,
        team: { workers: [{ role: 'pro', instructions: 'Pros.' }, { role: 'con', instructions: 'Cons.' }] },
      }),
    });
    expect(res.status).toBe(201);
    taskIds.push(((await res.json()) as { task: { task_id: string } }).task.task_id);
  }
  const watching = taskIds.map((): Watched => ({ events: [], resumes: 0 }));
  const watches = taskIds.map((id, i) => watchToEnd(stack!.grpcTarget, id, watching[i]!));
  // Mid-task: every worker of every task has started (and is waiting on its model answer).
  for (const id of firstOnly ? taskIds.slice(0, 1) : taskIds) {
    await waitForEvent(stack.url, id, (e) => e.event_type === 'worker_started' && e.worker_id === 'con-2', 30_000);
    await waitForEvent(stack.url, id, (e) => e.event_type === 'worker_started' && e.worker_id === 'pro-1', 30_000);
  }
  return { taskIds, watches, watching };
}

/** The worker an event of WatchTeam is about ('' for task events), as the HTTP log names it. */
function workerOf(e: TeamEventProto): string {
  const variant = e.event as { value?: { workerId?: string } } | undefined;
  return variant?.value?.workerId ?? '';
}

interface LoggedEvent {
  seq: number;
  event_type: string;
  worker_id: string | null;
  timestamp: string;
}

/**
 * Each task's log once it ended. A task the gateway answers 404 for fails the test, saying whether the surviving
 * cluster still holds it (each node read directly): a wrong answer, or a task Redis really lost. `mayHaveLost`
 * (the tasks whose writes went to a master killed before its replica had them) may be missing from the map, but
 * only if every live node answered and none holds the task: Redis lost it, the gateway did not.
 */
async function finalLogs(taskIds: string[], cluster?: TestCluster, killed = '', mayHaveLost = new Set<string>()): Promise<Map<string, LoggedEvent[]>> {
  const logs = await Promise.all(taskIds.map(async (id) => {
    try {
      return (await pollUntilTerminal(stack!.url, id, 90_000)).map((e) => ({ seq: e.seq, event_type: e.event_type, worker_id: e.worker_id, timestamp: e.timestamp }));
    } catch (err) {
      if (cluster && /did not finish/.test((err as Error).message)) throw new Error(`${(err as Error).message} (${killed}); ${await jobsOf(cluster, id)}; ${await listingOf(cluster, id)}`, { cause: err });
      if (!cluster || !/HTTP 404/.test((err as Error).message)) throw err;
      const holders = await whoHolds(cluster, new KeyBuilder(stack!.prefix).task(id).meta);
      if (mayHaveLost.has(id) && holders.lostByRedis) return undefined;
      throw new Error(`task ${id} answered 404 after the takeover (${killed}); ${holders.text}`, { cause: err });
    }
  }));
  return new Map(taskIds.flatMap((id, i) => (logs[i] ? [[id, logs[i]] as const] : [])));
}

/**
 * For a task that never ended: where its agent jobs are in BullMQ (each job's state, or "absent") and whether the
 * queue's slot is served by the master that was killed's replica — a job the killed master took but never
 * replicated is gone, while the task's own keys (another slot) may have survived.
 */
async function jobsOf(cluster: TestCluster, taskId: string): Promise<string> {
  const keys = new KeyBuilder(stack!.prefix);
  const conn = cluster.connect();
  try {
    const states = await Promise.all(['lead', 'pro-1', 'con-2'].map(async (worker) => {
      const id = agentJobId(taskId, worker);
      const job = await conn.hmget(keys.bullJob(AGENT_QUEUE, id), 'processedOn', 'finishedOn', 'failedReason', 'attemptsMade');
      const [inWait, inActive, inDelayed, inFailed, inCompleted] = await Promise.all(['wait', 'active', 'delayed', 'failed', 'completed'].map(async (list) => {
        const key = `${keys.bullPrefix()}:${AGENT_QUEUE}:${list}`;
        const type = await conn.type(key);
        if (type === 'list') return (await conn.lpos(key, id)) !== null;
        if (type === 'zset') return (await conn.zscore(key, id)) !== null;
        return false;
      }));
      const where = [inWait && 'wait', inActive && 'active', inDelayed && 'delayed', inFailed && 'failed', inCompleted && 'completed'].filter(Boolean).join('+') || 'in no list';
      return `${worker}: ${job.every((f) => f === null) ? 'absent' : `hash {processedOn ${job[0]}, finishedOn ${job[1]}, failedReason ${job[2]}, attempts ${job[3]}}`}, ${where}`;
    }));
    return `its jobs: ${states.join('; ')}; the queue's slot is served by ${(await cluster.masterOf(keys.bullJob(AGENT_QUEUE, 'x'))).port}`;
  } catch (err) {
    return `its jobs could not be read (${(err as Error).message})`;
  } finally {
    conn.disconnect();
  }
}

/**
 * For a task that never ended: whether it is still listed where the task reconciler's walk finds it (its
 * workspace's unfinished set) and in the enqueue mark set (the enqueue sweeper's), and what the gateway's reconcile
 * counter says (by trigger: a pass, or a read).
 */
/** The gateway's cadre_tasks_reconciled_total by trigger: found by a reconcile pass, or by read repair. */
async function reconciledBy(): Promise<string> {
  const scrape = await Scrape.of(`${stack!.url}/metrics`);
  return ['pass', 'read'].map((trigger) => `${trigger} ${scrape.value('cadre_tasks_reconciled_total', { trigger })}`).join(', ');
}

async function listingOf(cluster: TestCluster, taskId: string): Promise<string> {
  const keys = new KeyBuilder(stack!.prefix);
  const conn = cluster.connect();
  try {
    const listed = (await conn.sismember(keys.workspaceTasks('failover'), taskId)) === 1;
    const marked = (await conn.zscore(keys.tasksEnqueueing(), taskId)) !== null;
    return `${listed ? 'in' : 'NOT in'} its workspace's unfinished set, ${marked ? 'in' : 'not in'} the enqueue mark set; `
      + `the gateway's cadre_tasks_reconciled_total: ${await reconciledBy()}`;
  } catch (err) {
    return `its listing could not be read (${(err as Error).message})`;
  } finally {
    conn.disconnect();
  }
}

/**
 * Which nodes of the cluster hold `key` (replicas read with READONLY), which one serves its slot, and each node's
 * view: its role, link to its master, full syncs it served or took, and any error reading it — never swallowed,
 * since "holds nothing" must mean the node answered so.
 */
async function whoHolds(cluster: TestCluster, key: string): Promise<{ text: string; lostByRedis: boolean }> {
  const views: string[] = [];
  let held = false;
  let unreachable = 0;
  for (const node of cluster.nodes) {
    const conn = new Redis(node.url, { maxRetriesPerRequest: 1, lazyConnect: true, connectTimeout: 1_000, retryStrategy: () => null });
    conn.on('error', () => undefined);
    try {
      await conn.connect();
      await conn.call('READONLY');
      const replication = await conn.info('replication');
      const field = (text: string, name: string): string => new RegExp(`^${name}:(.*?)\\r?$`, 'm').exec(text)?.[1] ?? '?';
      const stats = await conn.info('stats');
      const state = field((await conn.call('CLUSTER', 'INFO')) as string, 'cluster_state');
      let holds: string;
      try {
        const here = (await conn.exists(key)) === 1;
        held ||= here;
        holds = here ? 'HOLDS IT' : 'not held';
      } catch (err) {
        holds = `not its slot (${(err as Error).message.split(' ')[0]})`;
      }
      views.push(`${node.port} ${field(replication, 'role')} ${holds} [cluster ${state}, link ${field(replication, 'master_link_status')}, `
        + `offset ${field(replication, 'master_repl_offset')}, full syncs served ${field(stats, 'sync_full')}, keys ${await conn.dbsize()}]`);
    } catch (err) {
      unreachable++;
      views.push(`${node.port} unreachable (${(err as Error).message})`);
    } finally {
      conn.disconnect();
    }
  }
  // Only the killed node may fail to answer for "held by none" to mean lost.
  return { text: `its slot's master is now ${(await cluster.masterOf(key)).port}; nodes: ${views.join('; ')}`, lostByRedis: !held && unreachable === 1 };
}

describe('Redis Cluster failover', () => {
  it('a master killed mid-task (its replica in sync): every task ends, no event lost or duplicated for any watcher', async () => {
    const cluster = await started(startTestCluster());
    const { taskIds, watches } = await startTasks(cluster, TASKS, 1500);
    const keys = new KeyBuilder(stack!.prefix);
    const victim = await cluster.masterOf(keys.task(taskIds[0]!).meta);
    // Writes wait (they are not refused) while the replica catches up; then the master dies with them unexecuted.
    const killedAt = Date.now();
    await cluster.killMaster(victim, { inSync: true });
    const healedAt = Date.now();

    const logs = await finalLogs(taskIds);
    const watched = await Promise.all(watches);
    for (const [i, id] of taskIds.entries()) {
      const log = logs.get(id)!;
      assertContiguous(log.map((e) => e.seq));
      expect(log.at(-1)!.event_type, `task ${i}: ${log.map((e) => e.event_type).join(',')}`).toMatch(/^task_(completed|failed)$/);
      expect(log.filter((e) => e.event_type.startsWith('task_') && e.event_type !== 'task_queued')).toHaveLength(1);
      // The watcher, across its resumes, saw exactly the log: each seq once, the same event at each seq.
      expect(watched[i]!.events.map((e) => [e.seq, e.eventType])).toEqual(log.map((e) => [e.seq, e.event_type]));
    }
    // Every task completed, the one on the dead master's slot too, with events written after the kill: the failover
    // was survived mid-task, not avoided.
    expect(taskIds.filter((id) => logs.get(id)!.at(-1)!.event_type === 'task_completed').length).toBe(TASKS);
    expect(logs.get(taskIds[0]!)!.filter((e) => Date.parse(e.timestamp) >= killedAt).length).toBeGreaterThan(0);
    process.stderr.write(`failover (replica in sync): replica took over in ${healedAt - killedAt} ms; watcher resumes ${watched.map((w) => w.resumes).join(',')}\n`);
  }, 180_000);

  it('a master killed with writes in flight: every task the surviving cluster holds ends, each log contiguous; what the replica never got is measured', async () => {
    const cluster = await started(startTestCluster());
    // Killed as soon as the first task's workers run: the others are queued behind them or running.
    const { taskIds, watches } = await startTasks(cluster, BUSY_TASKS, 300, true);
    const keys = new KeyBuilder(stack!.prefix);
    const victim = await cluster.masterOf(keys.task(taskIds[0]!).meta);
    const onVictim = new Set<string>();
    for (const id of taskIds) if ((await cluster.masterOf(keys.task(id).meta)) === victim) onVictim.add(id);
    const killedAt = Date.now();
    const { replicaBehindBytes } = await cluster.killMaster(victim);
    const healedAt = Date.now();

    // Redis replicates asynchronously: a task whose writes all went to the victim before its replica had them is
    // gone with it (README, "Failover"). Only then may a task be missing — on the victim's slots, with the replica
    // behind at the kill, and held by no live node; any other 404 is the gateway's and fails the test.
    const mayHaveLost = replicaBehindBytes > 0 ? onVictim : new Set<string>();
    const logs = await finalLogs(taskIds, cluster, `the replica was ${replicaBehindBytes} bytes behind at the kill`, mayHaveLost);
    const lost = taskIds.filter((id) => !logs.has(id));
    // A lost task's watch ends by itself (the gateway finds its log gone): none is left waiting.
    const watched = await Promise.all(watches);
    let forgotten = 0;
    /** Events each lost task's watcher had received before its task was gone. */
    const lostSeen: number[] = [];
    // Appends around the kill: the writes that were in flight when the master died.
    const near = [...logs.values()].flat().filter((e) => Math.abs(Date.parse(e.timestamp) - killedAt) < 250).length;
    const running = lost.length + [...logs.values()].filter((log) => Date.parse(log.at(-1)!.timestamp) > killedAt).length;
    expect(running, 'tasks still running when the master died').toBeGreaterThan(0);
    for (const [i, id] of taskIds.entries()) {
      const log = logs.get(id);
      if (!log) {
        // Lost with the victim: its watcher was told so, and everything it was sent is gone too.
        expect(watched[i]!.refused, `the watcher of lost task ${id}`).toMatchObject({ code: GrpcStatus.NOT_FOUND });
        forgotten += watched[i]!.events.length;
        lostSeen.push(watched[i]!.events.length);
        continue;
      }
      assertContiguous(log.map((e) => e.seq));
      expect(log.at(-1)!.event_type, `task ${i}: ${log.map((e) => e.event_type).join(',')}`).toMatch(/^task_(completed|failed)$/);
      // Events a watcher was sent that the surviving log does not hold at that seq: acknowledged, never replicated.
      const kept = new Set(log.map((e) => `${e.seq} ${e.event_type} ${e.worker_id ?? ''}`));
      forgotten += watched[i]!.events.filter((e) => !kept.has(`${e.seq} ${e.eventType} ${workerOf(e)}`)).length;
    }
    process.stderr.write(`failover with writes in flight: ${running} of ${BUSY_TASKS} tasks running, ${near} appends within 250 ms of the kill; `
      + `replica ${replicaBehindBytes} bytes behind at the kill, took over in ${healedAt - killedAt} ms; `
      + `tasks ${taskIds.map((id) => logs.get(id)?.at(-1)!.event_type.replace('task_', '') ?? 'LOST').join(',')} (${lost.length} lost with the victim, of ${onVictim.size} on its slots; their watchers had received ${lostSeen.join(',') || '-'} events, then NOT_FOUND); `
      + `events watchers saw that the surviving logs do not hold: ${forgotten}; resumes refused on a cursor: ${watched.filter((w) => w.refused && w.refused.code !== GrpcStatus.NOT_FOUND).length}; `
      + `tasks re-driven or failed by the gateway: ${await reconciledBy()}\n`);
  }, 180_000);
});

describe('Redis Cluster outage', () => {
  it('while the cluster is down the gateway answers 503 / UNAVAILABLE, never 404; after the takeover it answers again', async () => {
    const cluster = await started(startTestCluster());
    // A gateway alone: what is measured is what a reader is told.
    stack = await TestStack.start({ redis: cluster, workers: 0 });
    const api = httpClient(stack.url);
    const created = await api.post<{ task: { task_id: string } }>('/api/tasks', { workspace_id: 'failover', goal: 'Wait out an outage' });
    expect(created.status).toBe(201);
    const taskId = created.body.task.task_id;
    const outage = await cluster.killMasterWithoutTakeover(await cluster.masterOf(new KeyBuilder(stack.prefix).task(taskId).meta));

    // Asked while the cluster is down (each request first waits out the client's ~20 s of retries): the answer says
    // "retry", not "no such task", which a client would believe and give up on.
    const client = grpcClient(stack.grpcTarget);
    try {
      const [events, task, watch] = await Promise.all([
        api.get<{ error: { code: string } }>(`/api/tasks/${taskId}/events`),
        api.get<{ error: { code: string } }>(`/api/tasks/${taskId}`),
        watchTeam(client, { taskId }),
      ]);
      expect([events.status, events.body.error.code]).toEqual([503, 'unavailable']);
      expect([task.status, task.body.error.code]).toEqual([503, 'unavailable']);
      expect(watch.status.code).toBe(GrpcStatus.UNAVAILABLE);
    } finally {
      client.close();
    }

    await outage.takeOver();
    const after = await api.get<{ events: { event_type: string }[] }>(`/api/tasks/${taskId}/events`);
    expect(after.status).toBe(200);
    expect(after.body.events.map((e) => e.event_type)).toEqual(['task_queued']);
  }, 180_000);

});

describe('Redis Sentinel', () => {
  it('runs team tasks through the master a Sentinel names (REDIS_SENTINELS, REDIS_SENTINEL_NAME), watched to their end', async () => {
    const sentinel = await started(startTestSentinel());
    const { taskIds, watches } = await startTasks(sentinel, 3, 300);
    const logs = await finalLogs(taskIds);
    const watched = await Promise.all(watches);
    for (const [i, id] of taskIds.entries()) {
      const log = logs.get(id)!;
      assertContiguous(log.map((e) => e.seq));
      expect(log.at(-1)!.event_type).toBe('task_completed');
      expect(watched[i]!.events.map((e) => [e.seq, e.eventType])).toEqual(log.map((e) => [e.seq, e.event_type]));
    }
    // Everything went to the master the Sentinel names, and reached its replica.
    expect(await sentinel.currentMaster()).toBe(sentinel.master.port);
    const replica = new Redis(sentinel.replica.url);
    try {
      expect(await replica.hget(new KeyBuilder(stack!.prefix).task(taskIds[0]!).meta, 'status')).toBe('completed');
    } finally {
      replica.disconnect();
    }
  }, 120_000);

  it('the master killed mid-task (its replica in sync): Sentinel promotes the replica, every task ends, watchers see each event once', async () => {
    const sentinel = await started(startTestSentinel());
    const { taskIds, watches } = await startTasks(sentinel, 3, 1500);
    const killedAt = Date.now();
    await sentinel.killMaster({ inSync: true });
    const promotedAt = Date.now();
    const logs = await finalLogs(taskIds);
    const watched = await Promise.all(watches);
    for (const [i, id] of taskIds.entries()) {
      const log = logs.get(id)!;
      assertContiguous(log.map((e) => e.seq));
      expect(log.at(-1)!.event_type, `task ${i}: ${log.map((e) => e.event_type).join(',')}`).toBe('task_completed');
      expect(log.filter((e) => Date.parse(e.timestamp) >= killedAt).length).toBeGreaterThan(0);
      expect(watched[i]!.events.map((e) => [e.seq, e.eventType])).toEqual(log.map((e) => [e.seq, e.event_type]));
    }
    process.stderr.write(`sentinel failover: replica promoted in ${promotedAt - killedAt} ms; watcher resumes ${watched.map((w) => w.resumes).join(',')}\n`);
  }, 120_000);
});
