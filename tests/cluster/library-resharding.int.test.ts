// The store's Functions library on a Cluster that is resharded: a slot moving to a master added since the library
// was loaded. A cluster of its own: the test adds a node and moves a slot.
import type { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApprovalStore, KeyBuilder } from '@cadre/store';
import type { EmbeddedRedis } from '@cadre/embedded-redis';
import { startTestCluster, withConnection, type TestCluster } from '@cadre/testing';

let cluster: TestCluster;
let redis: Cluster;
beforeAll(async () => {
  cluster = await startTestCluster();
  redis = cluster.connect();
}, 120_000);
afterAll(async () => {
  await redis?.quit();
  await cluster?.stop();
});

const libraries = (node: EmbeddedRedis) => withConnection(node, async (conn) => JSON.stringify(await conn.call('FUNCTION', 'LIST')));

describe('the store library while a slot moves to a new master', () => {
  it('a call for a key of a slot migrating to a master without the library loads it there and succeeds', async () => {
    const keys = new KeyBuilder('reshard');
    const store = new ApprovalStore({ redis, keys });
    const policy = (tool: string) => ({ rules: [{ tool, action: 'deny' as const, reason: 'resharding test' }] });
    // The library is on the slot's owner, from a first call, as in a cluster in use.
    await store.setPolicy('moving', policy('before'));
    const key = keys.approvalPolicy('moving');
    const owner = await cluster.masterOf(key);
    expect(await libraries(owner)).toMatch(/"cadre_[0-9a-f]{12}"/);

    const added = await cluster.addEmptyMaster();
    expect(await libraries(added)).toBe('[]');
    // Resharding the key's slot to it, as `redis-cli --cluster reshard` starts: while the slot migrates, a key the
    // old owner does not hold (this one, once deleted there as if already moved) is answered with ASK, to the added
    // master.
    const slot = await withConnection(owner, async (conn) => (await conn.call('CLUSTER', 'KEYSLOT', key)) as number);
    const ids = await Promise.all([owner, added].map((node) => withConnection(node, async (conn) => (await conn.call('CLUSTER', 'MYID')) as string)));
    await withConnection(added, (conn) => conn.call('CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', ids[0]!));
    await withConnection(owner, (conn) => conn.call('CLUSTER', 'SETSLOT', String(slot), 'MIGRATING', ids[1]!));
    await withConnection(owner, (conn) => conn.del(key));

    await store.setPolicy('moving', policy('during'));
    expect(await store.getPolicy('moving')).toEqual(policy('during'));
    // Written on the added master, which now has the library.
    const written = await withConnection(added, async (conn) => {
      await conn.call('ASKING');
      return conn.get(key);
    });
    expect(written).toBe(JSON.stringify(policy('during')));
    expect(await libraries(added)).toMatch(/"cadre_[0-9a-f]{12}"/);
  }, 120_000);
});
