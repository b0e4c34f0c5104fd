import { Counter, type Registry } from 'prom-client';
import type { Logger } from '@cadre/observability';
import { basicAsBearer, bearerKey, keyDigest } from './auth.ts';

/** Where a refusal was answered: the HTTP API (tasks, sessions, approvals, runs, queue admin), gRPC, or /ws. */
export type AuthEdge = 'http' | 'grpc' | 'ws';

/** No credential sent; one sent that no configured key matches; a valid key that does not reach what was asked. */
export type AuthRefusalReason = 'missing_key' | 'invalid_key' | 'not_permitted';

/** The headers (and gRPC metadata keys) that carry a credential on any edge. */
const CREDENTIAL_HEADERS = ['authorization', 'x-windie-runs-key', 'x-windie-runs-control-key'] as const;

export interface AuthRefusal {
  edge: AuthEdge;
  /** The route template (`/api/tasks/:task_id`), the gRPC method (`roz.v1.AgentService/WatchTeam`) or `/ws`. */
  route: string;
  /** As the client saw it: `401`, `PERMISSION_DENIED`, `close 1008`. */
  status: string;
  /** 403 / PERMISSION_DENIED: the key was valid but does not reach what was asked. */
  forbidden: boolean;
  client: string;
  /** The request's headers or metadata; only the credential headers are read, and only as fingerprints. */
  credentials: (header: string) => string | string[] | undefined;
}

/** Refusal lines written per second at most; the rest are counted and reported in one line when the second ends. */
export const AUTH_REFUSAL_LINES_PER_SECOND = 10;
const WINDOW_MS = 1_000;

/**
 * Every request refused for its credentials, on any edge: one warn line (route, status, reason, client address and
 * the credential as a fingerprint, never the key or a header's value) and `cadre_auth_refused_total{edge,reason}`.
 * Lines are rate-limited per gateway so a brute force cannot flood the log; the metric counts every refusal.
 */
export class AuthRefusalLog {
  private readonly logger: Logger;
  private readonly refused: Counter<'edge' | 'reason'>;
  private windowEndsAt = 0;
  private written = 0;
  private dropped = 0;
  private summaryTimer: NodeJS.Timeout | undefined;

  constructor(logger: Logger, metrics: Registry) {
    this.logger = logger.child({ component: 'auth' });
    this.refused = new Counter({
      name: 'cadre_auth_refused_total', help: 'Requests, gRPC calls and /ws handshakes refused for their credentials, by edge and reason',
      labelNames: ['edge', 'reason'], registers: [metrics],
    });
  }

  record(refusal: AuthRefusal): void {
    const credential = fingerprints(refusal.credentials);
    const reason: AuthRefusalReason = refusal.forbidden ? 'not_permitted' : credential === 'none' ? 'missing_key' : 'invalid_key';
    this.refused.inc({ edge: refusal.edge, reason });
    const now = performance.now();
    if (now >= this.windowEndsAt) {
      this.reportDropped();
      this.windowEndsAt = now + WINDOW_MS;
      this.written = 0;
    }
    if (this.written < AUTH_REFUSAL_LINES_PER_SECOND) {
      this.written++;
      const { edge, route, status, client } = refusal;
      this.logger.warn({ edge, route, status, reason, client, credential }, 'refused: credentials');
      return;
    }
    // The summary is written when the second ends, even if no refusal follows.
    if (this.dropped++ === 0) this.summaryTimer = setTimeout(() => this.reportDropped(), this.windowEndsAt - now).unref();
  }

  /** Writes the pending summary (the gateway's drain). */
  stop(): void {
    this.reportDropped();
  }

  private reportDropped(): void {
    clearTimeout(this.summaryTimer);
    this.summaryTimer = undefined;
    if (this.dropped === 0) return;
    this.logger.warn({ dropped: this.dropped, lines_per_second: AUTH_REFUSAL_LINES_PER_SECOND }, 'refused: credentials (more refusals not logged, see cadre_auth_refused_total)');
    this.dropped = 0;
  }
}

/** `authorization:1a2b3c4d` for each credential header sent (first 8 hex of the key's SHA-256), or `none`. */
function fingerprints(credentials: AuthRefusal['credentials']): string {
  let out = '';
  for (const header of CREDENTIAL_HEADERS) {
    const raw = credentials(header);
    const value = (Array.isArray(raw) ? raw[0] : raw)?.trim();
    if (!value) continue;
    const key = header === 'authorization' ? presentedKey(value) : value;
    out += `${out ? ' ' : ''}${header}:${keyDigest(key).toString('hex', 0, 4)}`;
  }
  return out || 'none';
}

/**
 * The key inside an Authorization value (Bearer's token, Basic's password, as the gateway reads them), so a
 * fingerprint can be matched against sha256 of a configured key; any other value is fingerprinted whole.
 */
function presentedKey(value: string): string {
  return bearerKey(basicAsBearer(value)) ?? value;
}
