// Global setup of `npm run test:cluster`: one local Redis Cluster (three masters, three replicas) for every test
// file of the run; startTestRedis() hands it out (each file's stack has its own key prefix).
import { startTestCluster, TEST_CLUSTER_ENV } from '@cadre/testing';

export default async function setup(): Promise<() => Promise<void>> {
  const cluster = await startTestCluster();
  process.env[TEST_CLUSTER_ENV] = cluster.seeds;
  return () => cluster.stop();
}
