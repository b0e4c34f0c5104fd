import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { EventRelay } from './event-relay.ts';
import { GatewayError, type RelayedEvent } from './gateway-client.ts';

const silent = pino({ level: 'silent' });

function fakeGateway(fail: (call: number) => GatewayError | null = () => null) {
  const batches: string[][] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  let calls = 0;
  return {
    batches,
    maxInFlight: () => maxInFlight,
    client: {
      async relay(_run: string, _worker: string, _lease: string, events: RelayedEvent[]): Promise<void> {
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        await new Promise((r) => setTimeout(r, 5));
        inFlight--;
        const err = fail(calls++);
        if (err) throw err;
        batches.push(events.map((e) => `${e.event_type}:${(e.payload as { i: number }).i}`));
      },
    },
  };
}

const relayFor = (gw: ReturnType<typeof fakeGateway>, onFenced: () => void = () => {}) =>
  new EventRelay({ client: gw.client, runId: 'r', workerId: 'w', leaseId: 'L1', logger: silent, onFenced, flushMs: 10, maxBatch: 50 });

describe('EventRelay', () => {
  it('sends nothing before start, then everything in order, in batches of at most 50, one request at a time', async () => {
    const gw = fakeGateway();
    const relay = relayFor(gw);
    for (let i = 0; i < 120; i++) relay.push('e', { i });
    await new Promise((r) => setTimeout(r, 30));
    expect(gw.batches).toEqual([]);
    relay.start();
    for (let i = 120; i < 130; i++) relay.push('e', { i });
    expect(await relay.drain()).toBe(true);
    expect(gw.batches.flat()).toEqual(Array.from({ length: 130 }, (_, i) => `e:${i}`));
    expect(Math.max(...gw.batches.map((b) => b.length))).toBe(50);
    expect(gw.maxInFlight()).toBe(1);
  });

  it('retries a batch while the gateway is away, keeping order', async () => {
    const gw = fakeGateway((call) => (call < 2 ? new GatewayError('unavailable', null, 'ECONNREFUSED') : null));
    const relay = relayFor(gw);
    relay.start();
    relay.push('a', { i: 1 });
    relay.push('b', { i: 2 });
    expect(await relay.drain()).toBe(true);
    expect(gw.batches).toEqual([['a:1', 'b:2']]);
  });

  it('stops at a 409: drops the queue, reports it once, ignores later events', async () => {
    let fenced = 0;
    const gw = fakeGateway(() => new GatewayError('fenced', 409, 'HTTP 409'));
    const relay = relayFor(gw, () => fenced++);
    relay.start();
    relay.push('a', { i: 1 });
    expect(await relay.drain()).toBe(false);
    relay.push('b', { i: 2 });
    expect(await relay.drain()).toBe(false);
    expect(fenced).toBe(1);
    expect(relay.wasFenced).toBe(true);
  });
});
