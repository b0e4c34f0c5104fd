// Load generator for overhead.bench.ts, in a process of its own. mode cadre: POST /api/tasks, then WatchTeam
// to the task's end. mode raw: FlowProducer.add of the same shape (a parent and one child), then
// waitUntilFinished. On {cmd:'run', tasks, concurrency} it runs that many tasks, `concurrency` in flight, and
// reports the submit call's latency (POST /api/tasks or flow.add) and the whole task's.
import * as grpc from '@grpc/grpc-js';
import { FlowProducer, QueueEvents, type ConnectionOptions } from 'bullmq';
import type { AgentServiceClient } from '@cadre/protocol';
import { AGENT_JOB_OPTIONS } from '@cadre/store';
import { BENCH_API_KEY, grpcChannels, openWatch } from '../support/harness.ts';
import { summarize } from '../support/latency.ts';
import { argJson, commands, emit } from '../support/child.ts';
import { GOAL, INSTRUCTIONS, RAW_QUEUE } from '../support/task-shape.ts';


const o = argJson<{ mode: 'cadre' | 'raw'; url?: string; target?: string; redisUrl?: string; prefix?: string }>();

/** Runs task i; returns [submit ms, task ms]. */
let runOne: (i: number) => Promise<[number, number]>;
let close: () => Promise<void>;
if (o.mode === 'cadre') {
  const [client] = grpcChannels(o.target!, 1) as [AgentServiceClient];
  runOne = async (i) => {
    const t0 = performance.now();
    const res = await fetch(`${o.url}/api/tasks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BENCH_API_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ workspace_id: 'bench', goal: `${GOAL} #${i}`, team: { workers: [{ role: 'writer', instructions: INSTRUCTIONS }] } }),
    });
    const submitted = performance.now() - t0;
    if (res.status !== 201) throw new Error(`POST /api/tasks: ${res.status} ${await res.text()}`);
    const { task } = (await res.json()) as { task: { task_id: string } };
    let status = '';
    const end = await openWatch(client, task.task_id, 0, (e) => {
      if (e.event?.$case === 'taskStatusChanged') status = e.event.value.status;
    }).ended;
    if (end.code !== grpc.status.OK || status !== 'completed') throw new Error(`task ${task.task_id} ended ${status} (${end.code} ${end.details})`);
    return [submitted, performance.now() - t0];
  };
  close = async () => client.close();
} else {
  const { hostname, port } = new URL(o.redisUrl!);
  const connection: ConnectionOptions = { host: hostname, port: Number(port), maxRetriesPerRequest: null };
  const opts = { connection, prefix: o.prefix! };
  const flow = new FlowProducer(opts);
  const events = new QueueEvents(RAW_QUEUE, opts);
  await events.waitUntilReady();
  runOne = async (i) => {
    const goal = `${GOAL} #${i}`;
    const t0 = performance.now();
    const node = await flow.add({
      name: 'lead', queueName: RAW_QUEUE, data: { goal }, opts: AGENT_JOB_OPTIONS,
      children: [{ name: 'worker', queueName: RAW_QUEUE, data: { goal }, opts: AGENT_JOB_OPTIONS }],
    });
    const submitted = performance.now() - t0;
    const result = (await node.job.waitUntilFinished(events)) as string;
    if (!result.startsWith('Scripted answer')) throw new Error(`raw flow ${node.job.id} answered "${result}"`);
    return [submitted, performance.now() - t0];
  };
  close = async () => {
    await flow.close();
    await events.close();
  };
}

emit('ready');
let next = 0;
for await (const c of commands<{ cmd: 'run' | 'exit'; tasks: number; concurrency: number }>()) {
  if (c.cmd !== 'run') break;
  const submit = new Float64Array(c.tasks);
  const total = new Float64Array(c.tasks);
  let done = 0;
  const start = performance.now();
  await Promise.all(Array.from({ length: c.concurrency }, async () => {
    while (done < c.tasks) {
      const k = done++;
      [submit[k], total[k]] = await runOne(next++);
    }
  }));
  emit('done', { seconds: (performance.now() - start) / 1000, submit: summarize(submit), task: summarize(total) });
}
await close();
process.exit(0);
