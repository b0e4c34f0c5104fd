import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Cluster, Redis } from 'ioredis';
import { startEmbeddedRedis, type EmbeddedRedis } from '@cadre/embedded-redis';
import { killHoldingPort } from './dead-node.ts';
import type { TestRedis } from './redis.ts';
import { pauseUntilReplicated, replicationLag } from './replication.ts';
import { waitUntil } from './wait.ts';

const run = promisify(execFile);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A node stops being a master this long after it stops answering; its replica is elected soon after. */
export const CLUSTER_NODE_TIMEOUT_MS = 2_000;

/**
 * A local Redis Cluster: three masters, one replica each, every node a redis-server child on a free port. It is a
 * TestRedis too, so a TestStack can run on it.
 */
export interface TestCluster extends TestRedis {
  nodes: EmbeddedRedis[];
  /** `host:port,...` of every node, as REDIS_CLUSTER_NODES takes it. */
  seeds: string;
  connect(opts?: { shardedSubscribers?: boolean }): Cluster;
  /** The node serving `key`'s slot as master right now. */
  masterOf(key: string): Promise<EmbeddedRedis>;
  /** Until every slot is served by a master that answers and every replica has synced with its master. */
  waitHealthy(timeoutMs?: number): Promise<void>;
  /**
   * kill -9 a master; resolves once its replica has been promoted and the cluster is healthy again, with how far
   * the replica was behind just before the kill (bytes of the replication stream; what a failover can lose).
   * `inSync`: first pause writes until the replica has everything (see pauseUntilReplicated).
   */
  killMaster(node: EmbeddedRedis, opts?: { inSync?: boolean }): Promise<{ replicaBehindBytes: number }>;
  /**
   * kill -9 a master, its replica in sync, after telling the replica not to take over, so its slots stay unserved:
   * resolves once every live node reports the cluster down (CLUSTERDOWN to every command). `takeOver()` then has
   * the replica take the slots (CLUSTER FAILOVER TAKEOVER) and resolves once the cluster is healthy again.
   */
  killMasterWithoutTakeover(node: EmbeddedRedis): Promise<{ takeOver(): Promise<void> }>;
  /**
   * Starts one more node and joins it (CLUSTER MEET) as a master serving no slot yet, as an operator adds one before
   * moving slots to it; resolves once every node knows it and it sees every slot served. stop() stops it too.
   */
  addEmptyMaster(): Promise<EmbeddedRedis>;
  stop(): Promise<void>;
}

/** What makes a redis-server a node of a test cluster. */
const NODE_ARGS = [
  '--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', String(CLUSTER_NODE_TIMEOUT_MS),
  // No delay before a replica's first sync (Redis waits 5 s for more replicas to share a diskless one).
  '--repl-diskless-sync-delay', '0',
];

/**
 * Six redis-server processes joined by `redis-cli --cluster create --cluster-replicas 1`, healthy when it resolves.
 * A short node timeout makes a killed master's replica take over within a few seconds.
 */
export async function startTestCluster(): Promise<TestCluster> {
  const nodes = await Promise.all(Array.from({ length: 6 }, () => startEmbeddedRedis({ extraArgs: NODE_ARGS })));
  const addresses = nodes.map((n) => `127.0.0.1:${n.port}`);
  try {
    await run('redis-cli', ['--cluster', 'create', ...addresses, '--cluster-replicas', '1', '--cluster-yes'], { timeout: 60_000 });
  } catch (err) {
    await Promise.all(nodes.map((n) => n.stop()));
    throw new Error(`redis-cli --cluster create failed: ${(err as { stderr?: string; message: string }).stderr || (err as Error).message}`, { cause: err });
  }
  const seeds = addresses.join(',');
  /** The ports of killed nodes, kept (see killNode). */
  const held: { release(): void }[] = [];
  const cluster: TestCluster = {
    nodes,
    seeds,
    url: nodes[0]!.url,
    env: { REDIS_CLUSTER_NODES: seeds },
    target: { mode: 'cluster', nodes: nodes.map((n) => ({ host: '127.0.0.1', port: n.port })), tls: false },
    connect: (opts = {}) => new Cluster(nodes.map((n) => ({ host: '127.0.0.1', port: n.port })), {
      shardedSubscribers: opts.shardedSubscribers ?? false,
      redisOptions: { maxRetriesPerRequest: null },
      retryDelayOnFailover: 200,
      retryDelayOnClusterDown: 200,
      retryDelayOnMoved: 100,
      maxRedirections: 100,
    }),
    async masterOf(key) {
      const probe = new Redis(nodes.find((n) => isUp(n))!.url, { maxRetriesPerRequest: 1 });
      try {
        const slot = (await probe.call('CLUSTER', 'KEYSLOT', key)) as number;
        const shards = (await probe.call('CLUSTER', 'SLOTS')) as [number, number, [string, number]][];
        const port = shards.find(([from, to]) => slot >= from && slot <= to)?.[2][1];
        const node = nodes.find((n) => n.port === port);
        if (!node) throw new Error(`no master serves slot ${slot}`);
        return node;
      } finally {
        probe.disconnect();
      }
    },
    async waitHealthy(timeoutMs = 60_000) {
      const deadline = Date.now() + timeoutMs;
      let last = '';
      while (Date.now() < deadline) {
        last = await healthProblem(nodes.filter(isUp));
        if (last === '') return;
        await sleep(100);
      }
      throw new Error(`the test cluster did not become healthy within ${timeoutMs} ms: ${last}`);
    },
    async killMaster(node, opts = {}) {
      const replica = await replicaOf(nodes.filter((n) => isUp(n) && n !== node), node.port);
      if (opts.inSync) await pauseUntilReplicated(node.url, replica.url);
      const replicaBehindBytes = await replicationLag(node.url, replica.url);
      await killNode(node, held);
      await withConnection(replica, untilMaster);
      await cluster.waitHealthy();
      return { replicaBehindBytes };
    },
    async killMasterWithoutTakeover(node) {
      const replica = await replicaOf(nodes.filter((n) => isUp(n) && n !== node), node.port);
      await withConnection(replica, (conn) => conn.config('SET', 'cluster-replica-no-failover', 'yes'));
      // What is tested is what readers are told while the slots are unserved, not what async replication drops:
      // a write the replica never got (a task created just before the kill) would be gone after the takeover.
      await pauseUntilReplicated(node.url, replica.url);
      await killNode(node, held);
      await waitUntil('the test cluster to report itself down after the kill', () => clusterDown(nodes.filter(isUp)), { timeoutMs: 30_000, everyMs: 100 });
      return {
        async takeOver() {
          await withConnection(replica, async (conn) => {
            await conn.call('CLUSTER', 'FAILOVER', 'TAKEOVER');
            await conn.config('SET', 'cluster-replica-no-failover', 'no');
            await untilMaster(conn);
          });
          await cluster.waitHealthy();
        },
      };
    },
    async addEmptyMaster() {
      const node = await startEmbeddedRedis({ extraArgs: NODE_ARGS });
      nodes.push(node);
      await withConnection(node, (conn) => conn.call('CLUSTER', 'MEET', '127.0.0.1', String(nodes[0]!.port)));
      const known = nodes.filter(isUp);
      await waitUntil('every node to know the added master', async () => {
        const views = await Promise.all(known.map((n) => withConnection(n, async (conn) => (await conn.call('CLUSTER', 'INFO')) as string)));
        return views.every((info) => new RegExp(`^cluster_known_nodes:${known.length}\\r?$`, 'm').test(info));
      }, { timeoutMs: 30_000, everyMs: 100 });
      // Knowing every node is not yet knowing who serves each slot: until then it answers CLUSTERDOWN.
      await cluster.waitHealthy();
      return node;
    },
    async stop() {
      for (const holder of held) holder.release();
      await Promise.all(nodes.map((n) => n.stop()));
    },
  };
  await cluster.waitHealthy();
  return cluster;
}

/** The node replicating the master on `masterPort`. */
async function replicaOf(candidates: EmbeddedRedis[], masterPort: number): Promise<EmbeddedRedis> {
  for (const node of candidates) {
    const replication = await withConnection(node, (conn) => conn.info('replication'));
    if (new RegExp(`^master_port:${masterPort}\\r?$`, 'm').test(replication)) return node;
  }
  throw new Error(`no replica of the master on port ${masterPort}`);
}

/** `use` with a connection of its own to one node (closed after). */
export async function withConnection<T>(node: EmbeddedRedis, use: (conn: Redis) => Promise<T>): Promise<T> {
  const conn = new Redis(node.url, { maxRetriesPerRequest: 1 });
  try {
    return await use(conn);
  } finally {
    conn.disconnect();
  }
}

/** Waits until the node on `conn` has taken over as a master (a replica promoted by a failover). */
async function untilMaster(conn: Redis): Promise<void> {
  await waitUntil('the replica to become a master', async () => /^role:master\r?$/m.test(await conn.info('replication')), { timeoutMs: 30_000, everyMs: 50 });
}

/** Whether every one of `live` reports `cluster_state:fail`. */
async function clusterDown(live: EmbeddedRedis[]): Promise<boolean> {
  const states = await Promise.all(live.map((node) => withConnection(node, async (conn) => (await conn.call('CLUSTER', 'INFO')) as string)));
  return states.every((info) => /^cluster_state:fail\r?$/m.test(info));
}

const killed = new WeakSet<EmbeddedRedis>();

/** kill -9 a node of a test cluster; it stays down, its port held until the cluster stops (killHoldingPort). */
async function killNode(node: EmbeddedRedis, held: { release(): void }[]): Promise<void> {
  killed.add(node);
  held.push(await killHoldingPort(node));
}

const isUp = (node: EmbeddedRedis): boolean => !killed.has(node);

/** '' when every live node sees the cluster ok and every live replica is linked to its master; else why not. */
async function healthProblem(live: EmbeddedRedis[]): Promise<string> {
  for (const node of live) {
    const conn = new Redis(node.url, { maxRetriesPerRequest: 1, lazyConnect: true, connectTimeout: 1_000 });
    try {
      await conn.connect();
      const info = (await conn.call('CLUSTER', 'INFO')) as string;
      if (!/^cluster_state:ok\r?$/m.test(info) || !/^cluster_slots_ok:16384\r?$/m.test(info)) return `node ${node.port}: ${/cluster_state:\w+/.exec(info)?.[0]}`;
      const replication = await conn.info('replication');
      if (/^role:slave\r?$/m.test(replication) && (!/^master_link_status:up\r?$/m.test(replication) || /^master_sync_in_progress:1\r?$/m.test(replication))) {
        return `replica ${node.port} is not in sync with its master yet`;
      }
    } catch (err) {
      return `node ${node.port}: ${(err as Error).message}`;
    } finally {
      conn.disconnect();
    }
  }
  return '';
}
