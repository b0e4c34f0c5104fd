// The fan-out ceiling, in a process of its own: a bare grpc-js server speaking WatchTeam that keeps every open
// call in a list and, on `go`, broadcasts `count` events at `rate`, each encoded once and written as the same
// bytes to every call (what the gateway's fan-out does minus Redis, the shared tail and the watcher buffers).
// Its CPU per delivery is the best any design could do here. Ends every call after the last event.
import * as grpc from '@grpc/grpc-js';
import { AgentServiceService, TeamEventProto } from '@cadre/protocol';
import { paced } from '../support/latency.ts';
import { commands, emit, f64ToBase64, monoMs } from '../support/child.ts';

const calls: grpc.ServerWritableStream<unknown, Buffer>[] = [];
const encode = (seq: number, mode: string, turn: number): Buffer => Buffer.from(TeamEventProto.encode({
  taskId: 'ceiling', seq, attempt: 1, eventType: 'worker_phase', timestamp: new Date().toISOString(),
  event: { $case: 'workerPhase', value: { workerId: 'bench-1', phase: 0, phaseName: 'thinking', mode, turn } },
}).finish());

const server = new grpc.Server();
server.addService({ watchTeam: { ...AgentServiceService.watchTeam, responseSerialize: (b: Buffer): Buffer => b } }, {
  watchTeam: (call: grpc.ServerWritableStream<unknown, Buffer>) => {
    calls.push(call);
    call.on('cancelled', () => calls.splice(calls.indexOf(call), 1));
  },
});
const port = await new Promise<number>((resolve, reject) =>
  server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))));
emit('listening', { port });

let seq = 0;
for await (const c of commands<{ cmd: 'warm' | 'go' | 'exit'; count: number; rate: number }>()) {
  if (c.cmd === 'warm') {
    const bytes = encode(++seq, 'warm', 0);
    for (const call of calls) call.write(bytes);
    emit('warmed', { calls: calls.length });
  } else if (c.cmd === 'go') {
    const t0 = new Float64Array(c.count);
    const achieved = await paced(c.count, c.rate, (i) => {
      t0[i] = monoMs();
      const bytes = encode(++seq, 'bench', i);
      for (const call of calls) call.write(bytes);
    });
    emit('done', { t0: f64ToBase64(t0), achieved: Math.round(achieved), failed: 0 });
    for (const call of [...calls]) call.end();
  } else break;
}
server.forceShutdown();
