// The gateway's gRPC server: our services plus the standard health and reflection services. It binds no
// port of its own; listenOnePort hands it the HTTP/2 connections that arrive on the shared REST port.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { ReflectionService } from '@grpc/reflection';
import { HealthImplementation, protoPath as healthProtoPath } from 'grpc-health-check';

export interface GrpcServiceRegistration {
  definition: grpc.ServiceDefinition;
  implementation: grpc.UntypedServiceImplementation;
}

export interface GrpcServerOptions {
  services: GrpcServiceRegistration[];
  /** Path to agent.proto for reflection; it must sit at <root>/roz/v1/agent.proto, as in this repo. */
  protoPath?: string;
  /** How long close() lets in-flight calls (e.g. open WatchTeam streams) finish before cutting them. */
  shutdownGraceMs?: number;
}

export interface GrpcServerHandle {
  server: grpc.Server;
  /** Feed it accepted sockets whose bytes start with the HTTP/2 preface. */
  injector: grpc.ConnectionInjector;
  health: { setServing(): void; setNotServing(): void };
  close(): Promise<void>;
}

const AGENT_PROTO_FILE = 'roz/v1/agent.proto';
const REPO_PROTO_PATH = fileURLToPath(new URL(`../../../../proto/${AGENT_PROTO_FILE}`, import.meta.url));

export function createGrpcServer(opts: GrpcServerOptions): GrpcServerHandle {
  const server = new grpc.Server();
  for (const { definition, implementation } of opts.services) server.addService(definition, implementation);

  // '' is the whole server; each service is also checked by its full name (e.g. roz.v1.AgentService).
  // They start NOT_SERVING: the composition root calls setServing() once the port accepts connections.
  const healthNames = ['', ...opts.services.map((s) => serviceNameOf(s.definition))];
  const health = new HealthImplementation(Object.fromEntries(healthNames.map((name) => [name, 'NOT_SERVING'])));
  health.addToServer(server);
  const setAll = (status: 'SERVING' | 'NOT_SERVING') => {
    for (const name of healthNames) health.setStatus(name, status);
  };

  new ReflectionService(loadReflectedProtos(opts.protoPath ?? REPO_PROTO_PATH)).addToServer(server);

  const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
  const graceMs = opts.shutdownGraceMs ?? 5_000;

  return {
    server,
    injector,
    health: { setServing: () => setAll('SERVING'), setNotServing: () => setAll('NOT_SERVING') },
    close: () => shutdown(server, graceMs, () => setAll('NOT_SERVING')),
  };
}

/** Load agent.proto (and health.proto, so grpcurl can call Health without local files) by their
 * import-relative names, so reflection reports the same file names buf and protoc use. */
function loadReflectedProtos(agentProtoPath: string) {
  const agentRoot = path.resolve(path.dirname(agentProtoPath), '../..');
  const healthRoot = path.resolve(path.dirname(healthProtoPath), '../..');
  // google/protobuf/timestamp.proto resolves from protobufjs's bundled well-known types.
  return loadSync([AGENT_PROTO_FILE, 'health/v1/health.proto'], { includeDirs: [agentRoot, healthRoot] });
}

/** Full service name from any method path: '/roz.v1.AgentService/WatchTeam' → 'roz.v1.AgentService'. */
function serviceNameOf(definition: grpc.ServiceDefinition): string {
  const firstMethod = Object.values(definition)[0];
  if (!firstMethod) throw new Error('a gRPC service definition needs at least one method');
  return firstMethod.path.split('/')[1] ?? '';
}

/** Flip health first so balancers stop routing here, then let calls finish, then cut what is left. */
function shutdown(server: grpc.Server, graceMs: number, markNotServing: () => void): Promise<void> {
  markNotServing();
  return new Promise((resolve) => {
    const force = setTimeout(() => {
      server.forceShutdown();
      resolve();
    }, graceMs);
    server.tryShutdown(() => {
      clearTimeout(force);
      resolve();
    });
  });
}
