// REST and gRPC (our service, health, reflection) on one real port, over real connections.
import { execFile } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import { createRequire } from 'node:module';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fastify from 'fastify';
import * as grpc from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { create, createFileRegistry, fromBinary, toBinary, toJson } from '@bufbuild/protobuf';
import { FileDescriptorProtoSchema, type FileDescriptorProto } from '@bufbuild/protobuf/wkt';
import { service as healthServiceDefinition } from 'grpc-health-check';
import { AgentServiceClient, AgentServiceService, toProtoTeamEvent } from '@cadre/protocol';
import type { AgentServiceServer, TeamEvent, TeamEventProto } from '@cadre/protocol';
import { createGrpcServer } from '../grpc/server.ts';
import { listenOnePort } from './one-port.ts';

const TASK_ID = 'task-one-port';
const execFileAsync = promisify(execFile);
/** The buf CLI from devDependencies (what `npx buf` runs). */
const BUF = path.resolve(path.dirname(createRequire(import.meta.url).resolve('@bufbuild/buf/package.json')), 'bin/buf');
const loggedEvents: TeamEvent[] = [
  {
    event_type: 'worker_started',
    worker_id: 'w1',
    attempt: 1,
    payload: { host_id: 'h1', role: 'lead' },
    seq: 1,
    timestamp: '2025-01-01T00:00:00.000Z',
  },
  {
    event_type: 'task_cancelled',
    worker_id: null,
    attempt: 0,
    payload: { reason: 'test' },
    seq: 2,
    timestamp: '2025-01-01T00:00:01.000Z',
  },
];
const expectedEvents = loggedEvents.map((e) => toProtoTeamEvent(TASK_ID, e));

// Writes the task's two events, then ends the stream as a finished task's WatchTeam does.
const agentService: Pick<AgentServiceServer, 'watchTeam'> = {
  watchTeam: (call) => {
    for (const event of expectedEvents) call.write(event);
    call.end();
  },
};

let app: ReturnType<typeof buildHttpApp>;
let grpcServer: ReturnType<typeof createGrpcServer>;
let onePort: Awaited<ReturnType<typeof listenOnePort>>;
let target: string;
const clients: grpc.Client[] = [];

function buildHttpApp() {
  const httpApp = fastify({ serverFactory: (handler) => http.createServer(handler) });
  httpApp.get('/ping', async () => ({ pong: true }));
  return httpApp;
}

beforeAll(async () => {
  app = buildHttpApp();
  await app.ready();
  grpcServer = createGrpcServer({ services: [{ definition: AgentServiceService, implementation: agentService }] });
  onePort = await listenOnePort({
    port: 0,
    host: '127.0.0.1',
    httpServer: app.server,
    grpcInjector: grpcServer.injector,
  });
  grpcServer.health.setServing();
  target = `127.0.0.1:${onePort.port}`;
});

afterAll(async () => {
  for (const client of clients) client.close();
  // The gateway's shutdown order: stop accepting, then let each server end the connections it owns.
  await onePort.close();
  await grpcServer.close();
  // Fastify skips server.close() for a serverFactory server it never listened on, so close it here;
  // that also ends idle keep-alive connections.
  await app.close();
  await new Promise<void>((resolve) => app.server.close(() => resolve()));
});

function track<C extends grpc.Client>(client: C): C {
  clients.push(client);
  return client;
}

describe('listenOnePort', () => {
  it('serves REST on the port, including a second request on the kept-alive connection', async () => {
    for (let i = 0; i < 2; i++) {
      const response = await fetch(`http://${target}/ping`);
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual({ pong: true });
    }
  });

  it('streams WatchTeam events in order to a grpc-js client, then ends', async () => {
    const client = track(new AgentServiceClient(target, grpc.credentials.createInsecure()));
    const received: TeamEventProto[] = [];
    await new Promise<void>((resolve, reject) => {
      const stream = client.watchTeam({ taskId: TASK_ID, afterSeq: 0 });
      stream.on('data', (event: TeamEventProto) => received.push(event));
      stream.on('error', reject);
      stream.on('end', resolve);
    });
    expect(received).toEqual(expectedEvents);
  });

  it('answers the standard health check for roz.v1.AgentService', async () => {
    const HealthClient = grpc.makeClientConstructor(healthServiceDefinition, 'grpc.health.v1.Health');
    const client = track(new HealthClient(target, grpc.credentials.createInsecure()));
    const check = (client as unknown as { check: HealthCheck }).check.bind(client);
    const response = await new Promise<{ status: string }>((resolve, reject) =>
      check({ service: 'roz.v1.AgentService' }, (err, res) => (err ? reject(err) : resolve(res))),
    );
    expect(response.status).toBe('SERVING');
  });

  it('resolves every service reflection lists, and a client built from reflection alone checks Health', async () => {
    const client = track(reflectionClient(target));
    const stream = client.serverReflectionInfo();
    const ask = (request: ReflectionRequest) =>
      new Promise<ReflectionResponse>((resolve, reject) => {
        stream.once('data', resolve);
        stream.once('error', reject);
        stream.write(request);
      });
    const names = (await ask({ listServices: '' })).listServicesResponse!.service.map((s) => s.name).sort();
    // The descriptor set holds every service the gateway serves on its port (roz and kontekst), whatever this
    // test server registers.
    expect(names).toEqual(['grpc.health.v1.Health', 'kontekst.AgentService', 'kontekst.DaemonService', 'roz.v1.AgentService']);
    // Each service's file and its imports, as a reflection client (grpcurl, buf curl) links them.
    const files = new Map<string, FileDescriptorProto>();
    const roots: FileDescriptorProto[] = [];
    for (const name of names) {
      const answer = await ask({ fileContainingSymbol: name });
      expect(answer.errorResponse, name).toBeUndefined();
      const [root, ...imports] = answer.fileDescriptorResponse!.fileDescriptorProto.map((bytes) => fromBinary(FileDescriptorProtoSchema, bytes));
      roots.push(root!);
      for (const file of [root!, ...imports]) files.set(file.name, file);
    }
    stream.end();
    // createFileRegistry links every import and type reference, and throws on one it cannot resolve.
    const registry = createFileRegistry(...roots.map((root) => createFileRegistry(root, (name) => files.get(name))));
    for (const name of names) expect(registry.getService(name), name).toBeDefined();

    const check = registry.getService('grpc.health.v1.Health')!.methods.find((m) => m.name === 'Check')!;
    const generic = track(new grpc.Client(target, grpc.credentials.createInsecure()));
    const response = await new Promise<Record<string, unknown>>((resolve, reject) =>
      generic.makeUnaryRequest(
        `/grpc.health.v1.Health/${check.name}`,
        (message: object) => Buffer.from(toBinary(check.input, message as never)),
        (bytes: Buffer) => toJson(check.output, fromBinary(check.output, bytes)) as Record<string, unknown>,
        create(check.input, { service: 'roz.v1.AgentService' } as never),
        (err, res) => (err || !res ? reject(err) : resolve(res)),
      ),
    );
    expect(response).toEqual({ status: 'SERVING' });
  });

  it('answers `buf curl` through reflection: every method listed, Health/Check callable', async () => {
    // A child process (the server shares this event loop, so never a sync spawn).
    const curl = async (...args: string[]) =>
      (await execFileAsync(BUF, ['curl', '--protocol', 'grpc', '--http2-prior-knowledge', ...args], { encoding: 'utf8', timeout: 20_000 })).stdout;
    expect((await curl('--list-methods', `http://${target}`)).trim().split('\n')).toEqual([
      'grpc.health.v1.Health/Check',
      'grpc.health.v1.Health/List',
      'grpc.health.v1.Health/Watch',
      'kontekst.AgentService/Run',
      'kontekst.DaemonService/GetStatus',
      'kontekst.DaemonService/Shutdown',
      'roz.v1.AgentService/StreamSession',
      'roz.v1.AgentService/WatchTeam',
    ]);
    const health = JSON.parse(await curl('-d', '{"service":"roz.v1.AgentService"}', `http://${target}/grpc.health.v1.Health/Check`));
    expect(health).toEqual({ status: 'SERVING' });
  });

  it('routes a connection whose first bytes arrive in pieces', async () => {
    // HTTP/1: "P" still matches the HTTP/2 preface, so the router must wait for the next chunk.
    const request = 'OST /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n';
    const http1Reply = await rawExchange(['P', request]);
    // Only GET /ping exists, so a 404 means Fastify parsed the whole request, first byte included.
    expect(http1Reply.toString('latin1')).toMatch(/^HTTP\/1.1 404/);
    // HTTP/2: a preface split mid-way, then an empty SETTINGS frame; the server answers with its SETTINGS.
    const emptySettingsFrame = Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]);
    const http2Reply = await rawExchange([
      'PRI * HTTP/2.0\r\n',
      Buffer.concat([Buffer.from('\r\nSM\r\n\r\n'), emptySettingsFrame]),
    ]);
    expect(http2Reply[3]).toBe(4); // frame type of the server's first frame: SETTINGS
  });
});

type HealthCheck = (
  request: { service: string },
  callback: (err: grpc.ServiceError | null, response: { status: string }) => void,
) => void;
type ReflectionRequest = { listServices: string } | { fileContainingSymbol: string };
type ReflectionResponse = {
  listServicesResponse?: { service: Array<{ name: string }> };
  fileDescriptorResponse?: { fileDescriptorProto: Buffer[] };
  errorResponse?: { errorCode: number; errorMessage: string };
};
type ReflectionClient = grpc.Client & {
  serverReflectionInfo(): grpc.ClientDuplexStream<ReflectionRequest, ReflectionResponse>;
};

/** A v1 reflection client from the proto file bundled with @grpc/reflection. */
function reflectionClient(address: string): ReflectionClient {
  const reflectionEntry = createRequire(import.meta.url).resolve('@grpc/reflection'); // build/src/index.js
  const reflectionRoot = path.resolve(path.dirname(reflectionEntry), '../proto');
  const definition = loadSync('grpc/reflection/v1/reflection.proto', { includeDirs: [reflectionRoot], oneofs: true });
  const Client = grpc.makeClientConstructor(
    definition['grpc.reflection.v1.ServerReflection'] as grpc.ServiceDefinition,
    'grpc.reflection.v1.ServerReflection',
  );
  return new Client(address, grpc.credentials.createInsecure()) as unknown as ReflectionClient;
}

/** Writes each chunk on its own turn of the event loop, then collects the first reply bytes. */
function rawExchange(chunks: Array<string | Buffer>): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const writeChunks = async () => {
      socket.setNoDelay(true);
      for (const chunk of chunks) {
        socket.write(chunk);
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    const socket = net.connect(onePort.port, '127.0.0.1', () => void writeChunks());
    socket.once('data', (reply) => {
      socket.destroy();
      resolve(reply);
    });
    socket.once('error', reject);
  });
}
