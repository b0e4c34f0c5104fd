import * as grpc from '@grpc/grpc-js';
import { kontekst } from '@cadre/protocol';
import type { Authenticator } from '../auth.ts';
import { grpcStatusOf, toApiError } from '../errors.ts';
import type { RunsAuthenticator } from '../runs/runs-auth.ts';
import { metadataValue } from './metadata.ts';

export interface DaemonServiceDeps {
  auth: Authenticator;
  /** stop-all's control key guards Shutdown too: an operator's key, not a workspace's. */
  runsAuth: RunsAuthenticator;
  startedAt: Date;
  /** host:port this gateway listens on (known once it listens). */
  bind(): string;
  /** The model server the workers use (credentials stripped), '' when unknown. */
  modelEndpoint: string;
  dataDir: string;
  /** Drains this gateway as a signal would; called after Shutdown has been answered. */
  requestShutdown(): void;
}

/** The operator key's header, as on POST /api/runs/stop-all. */
const CONTROL_KEY_HEADER = 'x-windie-runs-control-key';

/**
 * kontekst.DaemonService: GetStatus reports this gateway (bind, uptime, start time) and the model server in
 * kontekst's fields (llama_server_* = the OpenAI-compatible server's health); Shutdown drains this gateway and
 * needs the runs control key (the operator key stop-all takes), sent as `x-windie-runs-control-key`.
 */
export function daemonService(deps: DaemonServiceDeps): { definition: grpc.ServiceDefinition; implementation: grpc.UntypedServiceImplementation } {
  const getStatus = (call: grpc.ServerUnaryCall<kontekst.GetStatusRequest, kontekst.GetStatusResponse>, callback: grpc.sendUnaryData<kontekst.GetStatusResponse>): void => {
    void (async () => {
      deps.auth.authenticate(metadataValue(call.metadata, 'authorization'));
      const healthy = deps.modelEndpoint ? await modelHealthy(deps.modelEndpoint) : false;
      return {
        bind: deps.bind(), endpoint: deps.modelEndpoint, modelDir: '', llamaServerHealthy: healthy, llamaServerRunning: healthy, llamaServerPid: 0,
        uptimeSeconds: Math.floor((Date.now() - deps.startedAt.getTime()) / 1000), startedAtRfc3339: deps.startedAt.toISOString(), dataDir: deps.dataDir,
      };
    })().then((status) => callback(null, status), (err: unknown) => callback(statusOf(err)));
  };
  const shutdown = (call: grpc.ServerUnaryCall<kontekst.ShutdownRequest, kontekst.ShutdownResponse>, callback: grpc.sendUnaryData<kontekst.ShutdownResponse>): void => {
    try {
      deps.runsAuth.checkStopAll(metadataValue(call.metadata, CONTROL_KEY_HEADER), undefined);
    } catch (err) {
      return callback(statusOf(err));
    }
    callback(null, { message: 'shutting down' });
    // After the answer is on its way: the drain lets in-flight calls finish, this one included.
    setImmediate(() => deps.requestShutdown());
  };
  return { definition: kontekst.DaemonServiceService as unknown as grpc.ServiceDefinition, implementation: { getStatus, shutdown } };
}

/** The model server answers its model list within a second (what an OpenAI-compatible health check can ask). */
async function modelHealthy(endpoint: string): Promise<boolean> {
  try {
    const res = await fetch(`${endpoint.replace(/\/+$/, '')}/models`, { signal: AbortSignal.timeout(1_000) });
    await res.body?.cancel();
    return res.status < 500;
  } catch {
    return false;
  }
}

/** The endpoint as GetStatus may show it: no user, password, query or fragment. */
export function publicEndpoint(url: string | undefined): string {
  if (!url) return '';
  try {
    const u = new URL(url);
    u.username = '';
    u.password = '';
    u.search = '';
    u.hash = '';
    return u.toString().replace(/\/$/, '');
  } catch {
    return '';
  }
}

function statusOf(err: unknown): Partial<grpc.StatusObject> {
  const api = toApiError(err);
  return api ? { code: grpcStatusOf(api.code), details: api.message } : { code: grpc.status.INTERNAL, details: 'internal error' };
}
