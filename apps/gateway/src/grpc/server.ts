// The gateway's gRPC server: our services plus the standard health and reflection services. It binds no
// port of its own; listenOnePort hands it the HTTP/2 connections that arrive on the shared REST port.
import * as grpc from '@grpc/grpc-js';
import { readFileSync } from 'node:fs';
import { fromBinary, toBinary } from '@bufbuild/protobuf';
import { FileDescriptorProtoSchema, FileDescriptorSetSchema } from '@bufbuild/protobuf/wkt';
import type { PackageDefinition } from '@grpc/proto-loader';
import { ReflectionService } from '@grpc/reflection';
import { DESCRIPTOR_SET_PATH, HEALTH_DESCRIPTOR_SET_PATH } from '@cadre/protocol';
import { HealthImplementation } from 'grpc-health-check';

export interface GrpcServiceRegistration {
  definition: grpc.ServiceDefinition;
  implementation: grpc.UntypedServiceImplementation;
}

export interface GrpcServerOptions {
  services: GrpcServiceRegistration[];
  /** The compiled FileDescriptorSet reflection serves (default: libs/protocol/descriptors/roz.binpb). */
  descriptorSetPath?: string;
  /** How long close() lets in-flight calls (e.g. open WatchTeam streams) finish before cutting them. */
  shutdownGraceMs?: number;
  /** Run around every call (metrics, tracing). */
  interceptors?: grpc.ServerInterceptor[];
  /**
   * Calls one HTTP/2 connection may have open at once (its SETTINGS_MAX_CONCURRENT_STREAMS; default: Node's, no
   * practical bound). A client holds a call beyond it until one of its calls on that connection ends.
   */
  maxConcurrentStreams?: number;
}

export interface GrpcServerHandle {
  server: grpc.Server;
  /** Feed it accepted sockets whose bytes start with the HTTP/2 preface. */
  injector: grpc.ConnectionInjector;
  health: { setServing(): void; setNotServing(): void };
  close(): Promise<void>;
}

export function createGrpcServer(opts: GrpcServerOptions): GrpcServerHandle {
  const server = new grpc.Server({
    interceptors: opts.interceptors ?? [],
    ...(opts.maxConcurrentStreams !== undefined && { 'grpc.max_concurrent_streams': opts.maxConcurrentStreams }),
  });
  for (const { definition, implementation } of opts.services) server.addService(definition, implementation);

  // '' is the whole server; each service is also checked by its full name (e.g. roz.v1.AgentService).
  // They start NOT_SERVING: the composition root calls setServing() once the port accepts connections.
  const healthNames = ['', ...opts.services.map((s) => serviceNameOf(s.definition))];
  const health = new HealthImplementation(Object.fromEntries(healthNames.map((name) => [name, 'NOT_SERVING'])));
  health.addToServer(server);
  const setAll = (status: 'SERVING' | 'NOT_SERVING') => {
    for (const name of healthNames) health.setStatus(name, status);
  };

  new ReflectionService(reflectedFiles([opts.descriptorSetPath ?? DESCRIPTOR_SET_PATH, HEALTH_DESCRIPTOR_SET_PATH])).addToServer(server);

  const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
  const graceMs = opts.shutdownGraceMs ?? 5_000;

  return {
    server,
    injector,
    health: { setServing: () => setAll('SERVING'), setNotServing: () => setAll('NOT_SERVING') },
    close: () => shutdown(server, graceMs, () => setAll('NOT_SERVING')),
  };
}

/**
 * What reflection serves: the FileDescriptorSets buf compiled (npm run proto:gen) from proto/ and from the
 * health.proto of grpc-health-check, file by file with their real names and import lists, so clients such as
 * `buf curl` and grpcurl can link every listed service (roz.v1.AgentService to google.protobuf.Timestamp, and
 * grpc.health.v1.Health). proto-loader's own descriptors regroup files by package, drop imports and keep relative
 * type names, which those clients cannot resolve.
 */
function reflectedFiles(descriptorSetPaths: string[]): PackageDefinition {
  const files = descriptorSetPaths.flatMap((p) => fromBinary(FileDescriptorSetSchema, readFileSync(p)).file);
  return {
    'cadre.reflection': { fileDescriptorProtos: files.map((file) => toBinary(FileDescriptorProtoSchema, file)) },
  } as unknown as PackageDefinition;
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
