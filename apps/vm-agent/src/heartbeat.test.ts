import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { GatewayError, type HeartbeatRequest, type HeartbeatResponse } from './gateway-client.ts';
import { HeartbeatLoop } from './heartbeat.ts';

const silent = pino({ level: 'silent' });
const answer = (intervalMs: number): HeartbeatResponse => ({ worker: {} as never, assigned_run: null, control_commands: [], heartbeat_interval_ms: intervalMs });

/** A gateway that answers from a script; records each beat's time and body. */
function fakeGateway(script: ('down' | number)[]) {
  const beats: { at: number; body: HeartbeatRequest }[] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  return {
    beats,
    maxInFlight: () => maxInFlight,
    client: {
      async heartbeat(body: HeartbeatRequest): Promise<HeartbeatResponse> {
        beats.push({ at: Date.now(), body: structuredClone(body) });
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        await new Promise((r) => setTimeout(r, 5));
        inFlight--;
        const step = script[beats.length - 1] ?? 1_000;
        if (step === 'down') throw new GatewayError('unavailable', 503, 'HTTP 503');
        return answer(step);
      },
    },
  };
}

beforeEach(() => {
  vi.useFakeTimers({ now: 0 });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('HeartbeatLoop', () => {
  it("beats on the server's cadence, backs off while the gateway is down, and keeps acks until a beat carrying them succeeds", async () => {
    const gw = fakeGateway([200, 'down', 'down', 300, 300]);
    const responses: HeartbeatResponse[] = [];
    const loop = new HeartbeatLoop({
      client: gw.client,
      identity: { workspace_id: 'ws', worker_id: 'w1', vm_id: 'vm', session_id: 's' },
      logger: silent,
      status: () => 'ready',
      onResponse: (res) => responses.push(res),
      random: () => 0.5, // no jitter
    });
    loop.start();
    await vi.advanceTimersByTimeAsync(0);
    loop.ack('cmd-1');
    await vi.advanceTimersByTimeAsync(2_000);
    await loop.stop();

    // 0 ok (interval 200) → 205 down (backoff 250) → 460 down (500) → 965 ok (300) → 1270 ok → 1575 …
    expect(gw.beats.slice(0, 6).map((b) => b.at)).toEqual([0, 205, 460, 965, 1270, 1575]);
    expect(gw.beats.slice(0, 5).map((b) => b.body.acked_command_ids)).toEqual([[], ['cmd-1'], ['cmd-1'], ['cmd-1'], []]);
    expect(gw.maxInFlight()).toBe(1);
    expect(responses.length).toBe(gw.beats.length - 2);
  });

  it('caps the backoff and jitters the cadence by at most 10%', async () => {
    const gw = fakeGateway([...Array(12).fill('down'), 1_000, 1_000, 1_000]);
    let r = 0;
    const loop = new HeartbeatLoop({
      client: gw.client,
      identity: { workspace_id: 'ws', worker_id: 'w1', vm_id: 'vm', session_id: 's' },
      logger: silent,
      status: () => 'running',
      onResponse: () => {},
      maxBackoffMs: 2_000,
      random: () => [0, 1][r++ % 2]!,
    });
    loop.start();
    await vi.advanceTimersByTimeAsync(30_000);
    await loop.stop();
    const gaps = gw.beats.slice(1).map((b, i) => b.at - gw.beats[i]!.at - 5);
    expect(Math.max(...gaps.slice(0, 12))).toBeLessThanOrEqual(2_000);
    for (const gap of gaps.slice(12, 14)) expect(gap === 900 || gap === 1_100).toBe(true);
    expect(gw.beats.every((b) => b.body.status === 'running')).toBe(true);
  });
});
