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

const digest = (s: string): Buffer => createHash('sha256').update(s).digest();

/**
 * Bearer-key authentication. Keys are compared as SHA-256 digests with timingSafeEqual against every configured
 * key (no early exit), so neither length nor prefix leaks through timing. Keys are never logged.
 */
export class Authenticator {
  private readonly entries: { digest: Buffer; principal: Principal }[];
  private readonly devMode: boolean;

  constructor(config: AuthConfig) {
    this.devMode = config.devMode;
    this.entries = [];
    if (config.apiKey) this.entries.push({ digest: digest(config.apiKey), principal: { workspaces: 'all' } });
    for (const [key, ws] of config.workspaceKeys) this.entries.push({ digest: digest(key), principal: { workspaces: ws } });
  }

  /** `header` is the Authorization header / metadata value. */
  authenticate(header: string | undefined): Principal {
    if (this.entries.length === 0) {
      if (this.devMode) return { workspaces: 'all' };
      throw new ApiError('unavailable', 'no API key is configured on this gateway (set CADRE_API_KEY or CADRE_API_KEYS)');
    }
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
    if (!match) throw new ApiError('unauthenticated', 'missing bearer key: send "Authorization: Bearer <key>"');
    const presented = digest(match[1]!);
    let found: Principal | undefined;
    for (const entry of this.entries) {
      if (timingSafeEqual(entry.digest, presented) && !found) found = entry.principal;
    }
    if (!found) throw new ApiError('unauthenticated', 'invalid API key');
    return found;
  }
}

export function canAccess(principal: Principal, workspaceId: string): boolean {
  return principal.workspaces === 'all' || principal.workspaces === workspaceId;
}
