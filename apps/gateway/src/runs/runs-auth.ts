import { timingSafeEqual } from 'node:crypto';
import { KeyTable, keyDigest, type Principal } from '../auth.ts';
import { ApiError } from '../errors.ts';

/** As the original: surrounding blanks of a configured or presented key do not count; blank is unset. */
const normalized = (value: string | string[] | undefined): string | undefined => {
  const v = (Array.isArray(value) ? value[0] : value)?.trim();
  return v ? v : undefined;
};

export interface RunsAuthConfig {
  /** The original's shared key: every workspace. */
  runsKey?: string;
  /** key → workspace: a workspace's VM agents see and write only that workspace. */
  workspaceKeys?: Map<string, string>;
  /** stop-all's key (every workspace). */
  controlKey?: string;
}

/**
 * The runs API's keys, with the original's meaning: `x-windie-runs-key` on every route except stop-all, which
 * needs the control key (`x-windie-runs-control-key`) instead, so a worker's key cannot stop every workspace.
 * Cadre adds per-workspace runs keys: such a key reaches only its workspace, and may stop-all that workspace.
 * Without a configured key the routes it guards answer 503. Every configured key is compared (as a digest, in
 * constant time, no early exit; an accepted key is remembered, see KeyTable); keys are never logged.
 */
export class RunsAuthenticator {
  private readonly keys = new KeyTable();
  private readonly controlKey: Buffer | undefined;

  constructor(opts: RunsAuthConfig) {
    const runsKey = normalized(opts.runsKey);
    if (runsKey) this.keys.add(runsKey, { workspaces: 'all' });
    for (const [key, ws] of opts.workspaceKeys ?? []) {
      const k = normalized(key);
      if (k) this.keys.add(k, { workspaces: ws });
    }
    const controlKey = normalized(opts.controlKey);
    this.controlKey = controlKey ? keyDigest(controlKey) : undefined;
  }

  /** The runs key's reach: every workspace (the shared key) or one. */
  check(header: string | string[] | undefined): Principal {
    if (this.keys.size === 0) throw new ApiError('unavailable', 'Runs API key is not configured');
    const found = this.match(header);
    if (!found) throw new ApiError('unauthenticated', 'Invalid runs API key');
    return found;
  }

  /**
   * stop-all: the control key reaches every workspace; a workspace's runs key reaches its own (the route checks
   * the body names it). The shared runs key is not enough, as in the original.
   */
  checkStopAll(controlHeader: string | string[] | undefined, runsHeader: string | string[] | undefined): Principal {
    if (this.controlKey && this.matches(this.controlKey, controlHeader)) return { workspaces: 'all' };
    const viaRunsKey = this.match(runsHeader);
    if (viaRunsKey && viaRunsKey.workspaces !== 'all') return viaRunsKey;
    if (!this.controlKey) throw new ApiError('unavailable', 'Runs control API key is not configured');
    throw new ApiError('permission_denied', 'Invalid runs control API key');
  }

  /** A workspace's runs key asked stop-all for more than its workspace: that needs the control key. */
  beyondWorkspace(workspace: string): ApiError {
    if (!this.controlKey) return new ApiError('unavailable', 'Runs control API key is not configured');
    return new ApiError('permission_denied', `a workspace's runs key stops only its workspace (send workspace_id "${workspace}"); stop-all beyond it needs x-windie-runs-control-key`);
  }

  private match(header: string | string[] | undefined): Principal | undefined {
    return this.keys.lookup(normalized(header) ?? '');
  }

  private matches(configured: Buffer, header: string | string[] | undefined): boolean {
    return timingSafeEqual(configured, keyDigest(normalized(header) ?? ''));
  }
}
