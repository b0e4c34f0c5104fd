import { createHash, timingSafeEqual } from 'node:crypto';
import { ApiError } from './errors.ts';

/** What a key may read and write: every workspace, or one. */
export type Principal = { workspaces: 'all' } | { workspaces: string };

export interface AuthConfig {
  /** A key valid for every workspace. */
  apiKey?: string;
  /** key → workspace. */
  workspaceKeys: Map<string, string>;
  /** With no key configured, dev mode lets every request through; outside it, nothing is served (503). */
  devMode: boolean;
}

/** A key as it is kept and compared: its SHA-256 digest (fixed length, so comparing leaks no length). */
export const keyDigest = (key: string): Buffer => createHash('sha256').update(key).digest();

/**
 * Configured keys and what each reaches. A presented key is compared as a digest with timingSafeEqual against
 * every configured key (no early exit), so neither length nor prefix leaks through timing. Keys are never logged.
 *
 * A client presents the same key on every request, and hashing it each time was 6% of the gateway's time under
 * heartbeat load and ~15 µs of every API request, so a key that was accepted once is remembered with its reach.
 * Only accepted keys are remembered, so the map holds at most one entry per configured key and wrong keys cannot
 * grow it; a wrong key always takes the full digest comparison.
 */
export class KeyTable {
  private readonly entries: { digest: Buffer; principal: Principal }[] = [];
  private readonly accepted = new Map<string, Principal>();

  add(key: string, principal: Principal): void {
    this.entries.push({ digest: keyDigest(key), principal });
  }

  get size(): number {
    return this.entries.length;
  }

  /** The reach of the first configured key equal to `presented`. */
  lookup(presented: string): Principal | undefined {
    const known = this.accepted.get(presented);
    if (known) return known;
    const digest = keyDigest(presented);
    let found: Principal | undefined;
    for (const entry of this.entries) {
      if (timingSafeEqual(entry.digest, digest) && !found) found = entry.principal;
    }
    if (found) this.accepted.set(presented, found);
    return found;
  }
}

/** The key an Authorization value presents as `Bearer <key>`; undefined for any other value. */
export const bearerKey = (header: string | undefined): string | undefined => /^Bearer\s+(\S+)\s*$/i.exec(header ?? '')?.[1];

/** `Basic base64(user:key)` → `Bearer key` (a browser's way to send a key); anything else is passed on as it came. */
export function basicAsBearer(header: string | undefined): string | undefined {
  const basic = /^Basic\s+(\S+)\s*$/i.exec(header ?? '');
  if (!basic) return header;
  const decoded = Buffer.from(basic[1]!, 'base64').toString();
  const colon = decoded.indexOf(':');
  return colon < 0 ? undefined : `Bearer ${decoded.slice(colon + 1)}`;
}

/** Bearer-key authentication over a KeyTable. */
export class Authenticator {
  private readonly keys = new KeyTable();
  private readonly devMode: boolean;

  constructor(config: AuthConfig) {
    this.devMode = config.devMode;
    if (config.apiKey) this.keys.add(config.apiKey, { workspaces: 'all' });
    for (const [key, ws] of config.workspaceKeys) this.keys.add(key, { workspaces: ws });
  }

  /** `header` is the Authorization header / metadata value. */
  authenticate(header: string | undefined): Principal {
    if (this.keys.size === 0) {
      if (this.devMode) return { workspaces: 'all' };
      throw new ApiError('unavailable', 'no API key is configured on this gateway (set CADRE_API_KEY or CADRE_API_KEYS)');
    }
    const key = bearerKey(header);
    if (key === undefined) throw new ApiError('unauthenticated', 'missing bearer key: send "Authorization: Bearer <key>"');
    const found = this.keys.lookup(key);
    if (!found) throw new ApiError('unauthenticated', 'invalid API key');
    return found;
  }
}

export function canAccess(principal: Principal, workspaceId: string): boolean {
  return principal.workspaces === 'all' || principal.workspaces === workspaceId;
}
