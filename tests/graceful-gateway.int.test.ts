import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TEST_API_KEY, assertContiguous, grpcClient, httpClient, watchTeam } from '@cadre/testing';
import { readSse } from './support/sse.ts';
import { TestStack } from './support/stack.ts';

// SIGTERM on a gateway process that 100 watchers are streaming a live task from: each gets a resumable status
// (gRPC UNAVAILABLE / an SSE `error` event with its last seq) and resumes on another gateway with no gap.
const GRPC_WATCHERS = 80;
const SSE_WATCHERS = 20;
let stack: TestStack;

beforeAll(async () => {
  stack = await TestStack.start({ workers: 1 });
});
afterAll(async () => {
  await stack?.stop();
});

describe('gateway SIGTERM under load', () => {
  it('closes 100 live watchers with a resumable status; each resumes on another gateway with no gap', async () => {
    const leaving = await stack.spawnGatewayProcess();
    const res = await httpClient(leaving.url).post<{ task: { task_id: string } }>('/api/tasks', {
      workspace_id: 'drain',
      goal: 'Outlive the gateway',
      team: { workers: ['a', 'b'].map((role) => ({ role, instructions: 'Wait. [[scripted:call=wait({"ms":2500})]]', tools: ['wait'] })) },
    });
    expect(res.status).toBe(201);
    const taskId = res.body.task.task_id;

    // Every watcher has its first event before the signal, so each is registered and streaming.
    let started = 0;
    let allStartedNow: () => void = () => undefined;
    const allStarted = new Promise<void>((resolve) => (allStartedNow = resolve));
    const firstEvent = (): (() => void) => {
      let seen = false;
      return () => {
        if (!seen && ++started === GRPC_WATCHERS + SSE_WATCHERS) allStartedNow();
        seen = true;
      };
    };
    const client = grpcClient(`127.0.0.1:${leaving.port}`);
    const grpcCuts = Array.from({ length: GRPC_WATCHERS }, () => watchTeam(client, { taskId }, TEST_API_KEY, firstEvent()));
    const sseCuts = Array.from({ length: SSE_WATCHERS }, () => readSse(`${leaving.url}/api/tasks/${taskId}/stream`, 0, { onEvent: firstEvent() }));
    await allStarted;

    const exited = new Promise<number | null>((resolve) => leaving.child.once('exit', resolve));
    leaving.child.kill('SIGTERM');
    const [grpcResults, sseResults] = await Promise.all([Promise.all(grpcCuts), Promise.all(sseCuts)]);
    expect(await exited).toBe(0);
    client.close();

    // Nothing ended cleanly on the leaving gateway: the task was still running, so every stream was cut, resumably.
    for (const cut of grpcResults) {
      expect(cut.status.code).toBe(grpc.status.UNAVAILABLE);
      expect(cut.status.details).toMatch(/shutting down/);
    }
    for (const cut of sseResults) {
      expect(cut.error).toMatchObject({ code: 'unavailable', last_seq: cut.seqs.at(-1) ?? 0 });
    }

    // Each resumes from its own cursor on the gateway that stays and gets the rest: no gap, no duplicate.
    const staying = grpcClient(stack.grpcTarget);
    try {
      const resumedGrpc = await Promise.all(grpcResults.map((cut) => watchTeam(staying, { taskId, afterSeq: cut.events.at(-1)?.seq ?? 0 })));
      const resumedSse = await Promise.all(sseResults.map((cut) => readSse(`${stack.url}/api/tasks/${taskId}/stream`, cut.error!.last_seq)));
      const full = (await httpClient(stack.url).get<{ events: { seq: number }[] }>(`/api/tasks/${taskId}/events?limit=1000`)).body.events.map((e) => e.seq);
      grpcResults.forEach((cut, i) => {
        const rest = resumedGrpc[i]!;
        expect(rest.status.code).toBe(grpc.status.OK);
        const seqs = [...cut.events, ...rest.events].map((e) => e.seq);
        assertContiguous(seqs);
        expect(seqs).toEqual(full);
      });
      sseResults.forEach((cut, i) => {
        const seqs = [...cut.seqs, ...resumedSse[i]!.seqs];
        assertContiguous(seqs);
        expect(seqs).toEqual(full);
        expect(resumedSse[i]!.error).toBeNull();
      });
      // The cut came mid-task: the log went on after it.
      expect(Math.max(...grpcResults.map((c) => c.events.at(-1)?.seq ?? 0))).toBeLessThan(full.at(-1)!);
    } finally {
      staying.close();
    }
  });
});
