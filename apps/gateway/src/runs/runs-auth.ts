import { createHash, timingSafeEqual } from 'node:crypto';
import { ApiError } from '../errors.ts';

const digest = (s: string): Buffer => createHash('sha256').update(s).digest();
const same = (configured: Buffer, presented: string | undefined): boolean => timingSafeEqual(configured, digest(presented ?? ''));

/**
 * The runs API's shared keys: `x-windie-runs-key` on every route, and, when a control key is configured,
 * `x-windie-runs-control-key` on stop-all. Digests compared in constant time; keys are never logged.
 */
export class RunsAuthenticator {
  private readonly runsKey: Buffer | undefined;
  private readonly controlKey: Buffer | undefined;

  constructor(opts: { runsKey?: string; controlKey?: string }) {
    this.runsKey = opts.runsKey ? digest(opts.runsKey) : undefined;
    this.controlKey = opts.controlKey ? digest(opts.controlKey) : undefined;
  }

  check(header: string | string[] | undefined): void {
    if (!this.runsKey) throw new ApiError('unavailable', 'the runs API is not configured (set RUNS_API_KEY)');
    const value = Array.isArray(header) ? header[0] : header;
    if (!value) throw new ApiError('unauthenticated', 'missing x-windie-runs-key header');
    if (!same(this.runsKey, value)) throw new ApiError('unauthenticated', 'invalid runs key');
  }

  checkControl(header: string | string[] | undefined): void {
    if (!this.controlKey) return;
    const value = Array.isArray(header) ? header[0] : header;
    if (!same(this.controlKey, value)) {
      throw new ApiError('permission_denied', 'stop-all requires the x-windie-runs-control-key header');
    }
  }
}
