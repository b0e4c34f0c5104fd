import { Redis } from 'ioredis';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const offsetOf = (info: string, field: string): number => Number(new RegExp(`^${field}:(\\d+)`, 'm').exec(info)?.[1] ?? NaN);

/**
 * Pauses writes on a master (CLIENT PAUSE WRITE: they wait, they are not refused) and waits until its replica has
 * processed everything the master had written by then, so killing the master loses nothing acknowledged, whatever
 * the replication delay. (The master's offset keeps creeping after the pause with its own pings and a Sentinel's
 * hello messages: the replica has to reach the offset read at the pause, not the moving one.)
 */
export async function pauseUntilReplicated(masterUrl: string, replicaUrl: string): Promise<void> {
  const master = new Redis(masterUrl, { maxRetriesPerRequest: 1 });
  const replica = new Redis(replicaUrl, { maxRetriesPerRequest: 1 });
  try {
    await master.call('CLIENT', 'PAUSE', '10000', 'WRITE');
    const written = offsetOf(await master.info('replication'), 'master_repl_offset');
    while (!(offsetOf(await replica.info('replication'), 'slave_repl_offset') >= written)) await sleep(10);
  } finally {
    master.disconnect();
    replica.disconnect();
  }
}

/** The master's replication offset minus its replica's, read one after the other: what a kill now could lose. */
export async function replicationLag(masterUrl: string, replicaUrl: string): Promise<number> {
  const master = new Redis(masterUrl, { maxRetriesPerRequest: 1 });
  const replica = new Redis(replicaUrl, { maxRetriesPerRequest: 1 });
  try {
    const written = offsetOf(await master.info('replication'), 'master_repl_offset');
    return written - offsetOf(await replica.info('replication'), 'slave_repl_offset');
  } finally {
    master.disconnect();
    replica.disconnect();
  }
}
