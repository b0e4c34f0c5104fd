import { createHash, timingSafeEqual } from 'node:crypto';
import { ApiError } from '../errors.ts';

const digest = (s: string): Buffer => createHash('sha256').update(s).digest();
const same = (configured: Buffer, presented: string | undefined): boolean => timingSafeEqual(configured, digest(presented ?? ''));
/** As the original: surrounding blanks of a configured or presented key do not count; blank is unset. */
const normalized = (value: string | string[] | undefined): string | undefined => {
  const v = (Array.isArray(value) ? value[0] : value)?.trim();
  return v ? v : undefined;
};

/**
 * The runs API's shared keys, with the original's meaning: `x-windie-runs-key` on every route except stop-all,
 * which needs the control key (`x-windie-runs-control-key`) instead, so a worker's key cannot stop every
 * workspace. Without a configured key the routes it guards answer 503. Digests compared in constant time; keys
 * are never logged.
 */
export class RunsAuthenticator {
  private readonly runsKey: Buffer | undefined;
  private readonly controlKey: Buffer | undefined;

  constructor(opts: { runsKey?: string; controlKey?: string }) {
    const runsKey = normalized(opts.runsKey);
    const controlKey = normalized(opts.controlKey);
    this.runsKey = runsKey ? digest(runsKey) : undefined;
    this.controlKey = controlKey ? digest(controlKey) : undefined;
  }

  check(header: string | string[] | undefined): void {
    if (!this.runsKey) throw new ApiError('unavailable', 'Runs API key is not configured');
    if (!same(this.runsKey, normalized(header))) throw new ApiError('unauthenticated', 'Invalid runs API key');
  }

  checkControl(header: string | string[] | undefined): void {
    if (!this.controlKey) throw new ApiError('unavailable', 'Runs control API key is not configured');
    if (!same(this.controlKey, normalized(header))) throw new ApiError('permission_denied', 'Invalid runs control API key');
  }
}
