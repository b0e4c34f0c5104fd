import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { startEmbeddedRedis, type EmbeddedRedis } from '@cadre/embedded-redis';
import { killHoldingPort } from './dead-node.ts';
import type { TestRedis } from './redis.ts';
import { pauseUntilReplicated } from './replication.ts';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const MASTER_NAME = 'mymaster';

/** A master, its replica and a Sentinel watching them (quorum 1): a TestRedis a TestStack can run on. */
export interface TestSentinel extends TestRedis {
  master: EmbeddedRedis;
  replica: EmbeddedRedis;
  sentinel: EmbeddedRedis;
  /** The address the Sentinel names as master now. */
  currentMaster(): Promise<number>;
  /**
   * kill -9 the master; resolves once the Sentinel has promoted the replica. `inSync`: first pause writes until the
   * replica has everything (see pauseUntilReplicated).
   */
  killMaster(opts?: { inSync?: boolean }): Promise<void>;
}

export async function startTestSentinel(): Promise<TestSentinel> {
  // No delay before the replica's first sync (Redis waits 5 s for more replicas to share a diskless one).
  const master = await startEmbeddedRedis({ extraArgs: ['--repl-diskless-sync-delay', '0'] });
  const replica = await startEmbeddedRedis({ extraArgs: ['--replicaof', '127.0.0.1', String(master.port)] });
  const dir = replica.dataDir;
  const configFile = join(dir, 'sentinel.conf');
  writeFileSync(configFile, '');
  const sentinel = await startEmbeddedRedis({
    dataDir: join(dir, 'sentinel'),
    configFile,
    extraArgs: [
      '--sentinel',
      '--sentinel', 'monitor', MASTER_NAME, '127.0.0.1', String(master.port), '1',
      '--sentinel', 'down-after-milliseconds', MASTER_NAME, '1000',
      '--sentinel', 'failover-timeout', MASTER_NAME, '10000',
    ],
  });
  const ask = async (): Promise<number> => {
    const conn = new Redis(sentinel.url, { maxRetriesPerRequest: 1 });
    try {
      const [, port] = (await conn.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', MASTER_NAME)) as [string, string];
      return Number(port);
    } finally {
      conn.disconnect();
    }
  };
  // Until the replica has synced and the Sentinel has found it (it learns replicas from the master's INFO).
  const replicaConn = new Redis(replica.url, { maxRetriesPerRequest: 1 });
  try {
    while (!/^master_link_status:up\r?$/m.test(await replicaConn.info('replication'))) await sleep(50);
  } finally {
    replicaConn.disconnect();
  }
  const conn = new Redis(sentinel.url, { maxRetriesPerRequest: 1 });
  try {
    for (;;) {
      const replicas = (await conn.call('SENTINEL', 'REPLICAS', MASTER_NAME)) as string[][];
      const flags = replicas.map((r) => r[r.indexOf('flags') + 1]);
      if (flags.length > 0 && flags.every((f) => f === 'slave')) break;
      await sleep(100);
    }
  } finally {
    conn.disconnect();
  }
  const sentinels = [{ host: '127.0.0.1', port: sentinel.port }];
  /** The killed master's port, kept (see killHoldingPort). */
  const held: { release(): void }[] = [];
  return {
    master,
    replica,
    sentinel,
    url: master.url,
    target: { mode: 'sentinel', sentinels, name: MASTER_NAME, tls: false, db: 0 },
    env: { REDIS_SENTINELS: `127.0.0.1:${sentinel.port}`, REDIS_SENTINEL_NAME: MASTER_NAME },
    connect: () => new Redis({ sentinels, name: MASTER_NAME, maxRetriesPerRequest: null }),
    currentMaster: ask,
    async killMaster(opts = {}) {
      if (opts.inSync) await pauseUntilReplicated(master.url, replica.url);
      held.push(await killHoldingPort(master));
      while ((await ask()) !== replica.port) await sleep(100);
    },
    async stop() {
      for (const holder of held) holder.release();
      await Promise.all([sentinel.stop(), replica.stop(), master.stop()]);
    },
  };
}

