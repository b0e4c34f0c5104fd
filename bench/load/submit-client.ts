// Load generator for submit.bench.ts, in a process of its own. On {cmd:'run', kind, requests, concurrency} it sends
// that many requests of one kind to the gateway, `concurrency` in flight, and reports their latency:
//   post     POST /api/tasks of the overhead bench's one-worker task (201 expected)
//   get      GET /api/tasks/:id of a task this client created (200)
//   refused  POST /api/tasks with a field the schema refuses (400): what a POST costs before any handler runs
//   healthz  GET /healthz (200): what any request costs
import { BENCH_API_KEY } from '../support/harness.ts';
import { summarize } from '../support/latency.ts';
import { argJson, commands, emit } from '../support/child.ts';
import { GOAL, INSTRUCTIONS } from '../support/task-shape.ts';

export type SubmitKind = 'post' | 'get' | 'refused' | 'healthz';
const EXPECTED: Record<SubmitKind, number> = { post: 201, get: 200, refused: 400, healthz: 200 };

const o = argJson<{ url: string }>();
const headers = { authorization: `Bearer ${BENCH_API_KEY}`, 'content-type': 'application/json' };
const created: string[] = [];
let next = 0;

async function send(kind: SubmitKind, i: number): Promise<Response> {
  switch (kind) {
    case 'post':
      return fetch(`${o.url}/api/tasks`, {
        method: 'POST', headers,
        body: JSON.stringify({ workspace_id: 'bench', goal: `${GOAL} #${i}`, team: { workers: [{ role: 'writer', instructions: INSTRUCTIONS }] } }),
      });
    case 'refused':
      return fetch(`${o.url}/api/tasks`, {
        method: 'POST', headers,
        body: JSON.stringify({ workspace_id: 'bench', goal: `${GOAL} #${i}`, team: { workers: [{ role: 'writer', instructions: INSTRUCTIONS }] }, colour: 'red' }),
      });
    case 'get':
      return fetch(`${o.url}/api/tasks/${created[i % created.length]!}`, { headers: { authorization: headers.authorization } });
    case 'healthz':
      return fetch(`${o.url}/healthz`);
    default: {
      const never: never = kind;
      throw new Error(`unknown kind ${String(never)}`);
    }
  }
}

emit('ready');
for await (const c of commands<{ cmd: 'run' | 'exit'; kind: SubmitKind; requests: number; concurrency: number }>()) {
  if (c.cmd !== 'run') break;
  if (c.kind === 'get' && created.length === 0) throw new Error('get: no task created yet (run post first)');
  const latency = new Float64Array(c.requests);
  let started = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: c.concurrency }, async () => {
    while (started < c.requests) {
      const k = started++;
      const at = performance.now();
      const res = await send(c.kind, next++);
      const text = await res.text();
      latency[k] = performance.now() - at;
      if (res.status !== EXPECTED[c.kind]) throw new Error(`${c.kind}: ${res.status} ${text.slice(0, 300)}`);
      if (c.kind === 'post' && created.length < 1000) created.push((JSON.parse(text) as { task: { task_id: string } }).task.task_id);
    }
  }));
  emit('done', { seconds: (performance.now() - t0) / 1000, latency: summarize(latency) });
}
process.exit(0);
