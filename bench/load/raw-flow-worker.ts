// The raw BullMQ side of overhead.bench.ts, in a process of its own: a Worker on the raw queue whose child job
// makes one streaming model call and whose parent makes one with the child's result: the call a Cadre agent
// makes for a one-turn answer, without Cadre's log, leases or events.
import { Worker, type ConnectionOptions, type Job } from 'bullmq';
import type OpenAI from 'openai';
import { createModelClient } from '@cadre/agent';
import { argJson, emit } from '../support/child.ts';
import { INSTRUCTIONS, RAW_QUEUE } from '../support/task-shape.ts';

const o = argJson<{ redisUrl: string; prefix: string; modelUrl: string; concurrency: number }>();

async function modelCall(openai: OpenAI, role: string, instructions: string, input: string): Promise<string> {
  const stream = await openai.chat.completions.create({
    model: 'cadre-scripted',
    messages: [
      { role: 'system', content: `You are the ${role} agent in a Cadre team.\n${instructions}` },
      { role: 'user', content: input },
    ],
    stream: true,
    stream_options: { include_usage: true },
  });
  let content = '';
  for await (const chunk of stream) content += chunk.choices[0]?.delta?.content ?? '';
  return content;
}

const { hostname, port } = new URL(o.redisUrl);
const connection: ConnectionOptions = { host: hostname, port: Number(port), maxRetriesPerRequest: null };
const openai = createModelClient({ baseURL: o.modelUrl, apiKey: 'scripted' });
const worker = new Worker(RAW_QUEUE, async (job: Job<{ goal: string }>) => {
  if (job.name === 'worker') return modelCall(openai, 'writer', INSTRUCTIONS, `Team goal: ${job.data.goal}`);
  const results = Object.values(await job.getChildrenValues<string>());
  return modelCall(openai, 'lead', 'Combine the results.', `Team goal: ${job.data.goal}\n\nWorker results:\n${results.join('\n')}`);
}, { connection, prefix: o.prefix, concurrency: o.concurrency });
await worker.waitUntilReady();
emit('ready');
process.on('SIGTERM', () => void worker.close().then(() => process.exit(0)));
