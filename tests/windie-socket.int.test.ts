import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { KeyBuilder, SessionStore } from '@cadre/store';
import { TEST_API_KEY, httpClient, keysMatching, untilStill, waitUntil, type TestRedisClient } from '@cadre/testing';
import { TestStack } from './support/stack.ts';

let stack: TestStack;
let redis: TestRedisClient;

// A second key for the sockets' default workspace ('windie', where the operator key's conversations live) and one
// for another workspace: conversations belong to the key that opened them, whatever user_id a handshake claims.
const WINDIE_KEY = 'windie-workspace-key-0123456789';
const OTHER_KEY = 'other-workspace-key-0123456789';

beforeAll(async () => {
  stack = await TestStack.start({ workers: 1, env: { CADRE_API_KEYS: `windie:${WINDIE_KEY},elsewhere:${OTHER_KEY}` } });
  redis = stack.redis.connect();
});
afterAll(async () => {
  redis?.disconnect();
  await stack?.stop();
});

interface Msg {
  id: string;
  type: string;
  payload: Record<string, any>;
}

/** A real ws client that keeps every server message and waits on conditions over them. */
class Client {
  readonly messages: Msg[] = [];
  readonly ws: WebSocket;
  readonly closed: Promise<{ code: number; reason: string }>;
  private waiters: (() => void)[] = [];

  constructor(key: string | null = TEST_API_KEY, url = stack.url) {
    this.ws = new WebSocket(`${url.replace('http', 'ws')}/ws`, { headers: key ? { authorization: `Bearer ${key}` } : {} });
    this.ws.on('message', (data) => {
      this.messages.push(JSON.parse(data.toString()) as Msg);
      for (const w of this.waiters) w();
    });
    this.closed = new Promise((resolve) => this.ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })));
  }

  open(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.ws.once('open', () => resolve());
      this.ws.once('error', reject);
    });
  }

  send(message: unknown): void {
    this.ws.send(typeof message === 'string' ? message : JSON.stringify(message));
  }

  envelope(type: string, payload: Record<string, unknown>): string {
    const id = randomUUID();
    this.send({ id, type, payload });
    return id;
  }

  async waitFor(pred: (all: Msg[]) => boolean, timeoutMs = 15_000): Promise<Msg[]> {
    const deadline = Date.now() + timeoutMs;
    while (!pred(this.messages)) {
      if (Date.now() > deadline) throw new Error(`timed out; got ${this.messages.map((m) => m.type).join(', ')}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 200);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
      this.waiters = [];
    }
    return this.messages;
  }

  count(type: string): number {
    return this.messages.filter((m) => m.type === type).length;
  }
}

/**
 * Sends `count` requests in one go, each `pad` bytes (JSON whitespace after the envelope): list-models, and every
 * tenth a made-up type whose error names it, so the answers' order shows. Returns the answers expected, in order.
 */
function sendBurst(client: Client, count: number, pad = 0, onSent?: () => void): string[] {
  const expected: string[] = [];
  for (let i = 0; i < count; i++) {
    const type = i % 10 === 9 ? `probe-${i}` : 'list-models';
    client.ws.send(`${JSON.stringify({ id: randomUUID(), type, payload: {} })}${' '.repeat(pad)}`, onSent);
    expected.push(type === 'list-models' ? 'models-listed' : `error: unknown message type "${type}"`);
  }
  return expected;
}
const answerOf = (m: Msg): string => (m.type === 'error' ? `error: ${m.payload.message}` : m.type);

const LOCATION_TOOL = { name: 'get_location', description: 'Where the user is', execution_target: 'local_runtime', schema: { type: 'object', properties: { precise: { type: 'boolean' } } } };
const handshake = (user: string, tools: object[] = [LOCATION_TOOL]) => ({
  type: 'handshake', user_id: user, agent_definition: { version: 1, tools: { mode: 'default_plus_client', client_manifest: { version: 1, tools } } },
});

describe('/ws (WindieOS agent socket)', () => {
  it.each([
    ['invalid JSON', '{"type":"handshake"', TEST_API_KEY],
    ['an envelope instead of the handshake', JSON.stringify({ id: '1', type: 'query', payload: {} }), TEST_API_KEY],
    ['a removed top-level field', JSON.stringify({ type: 'handshake', operating_system: 'macOS' }), TEST_API_KEY],
    ['a bad manifest', JSON.stringify({ type: 'handshake', agent_definition: { tools: { client_manifest: { tools: 'x' } } } }), TEST_API_KEY],
    ['a wrong key', JSON.stringify({ type: 'handshake' }), 'not-a-key'],
    ['no key', JSON.stringify({ type: 'handshake' }), null],
  ])('closes with 1008 on %s', async (_what, first, key) => {
    const client = new Client(key);
    await client.open();
    client.send(first);
    const { code } = await client.closed;
    expect(code).toBe(1008);
  });

  it('query → deltas → client tool-call answered by tool-result → streaming-complete', async () => {
    const client = new Client();
    await client.open();
    client.send(handshake('alice', [LOCATION_TOOL, { name: 'bad name!' }, { name: 'calculate', description: 'mine' }]));
    const [manifest] = await client.waitFor((all) => all.some((m) => m.type === 'client-tool-manifest'));
    expect(manifest!.payload.accepted).toEqual([{ name: 'get_location', description: 'Where the user is', execution_target: 'local_runtime' }]);
    expect(manifest!.payload.rejected.map((r: { name: string }) => r.name)).toEqual(['bad name!', 'calculate']);
    expect(manifest!.payload.rejected[1].reason).toMatch(/builtin/);

    client.envelope('query', { text: 'Where am I? [[scripted:call=get_location({"precise":true})]]', conversation_ref: 'conv-a' });
    const afterCall = await client.waitFor((all) => all.some((m) => m.type === 'tool-call'));
    const call = afterCall.find((m) => m.type === 'tool-call')!;
    expect(call.payload).toMatchObject({ tool_name: 'get_location', parameters: { precise: true }, metadata: { tool_call_id: expect.any(String) } });
    expect(typeof call.payload.request_id).toBe('string');

    client.envelope('tool-result', { request_id: call.payload.request_id, success: true, data: { output: 'Oslo' }, error: null });
    const all = await client.waitFor((msgs) => msgs.some((m) => m.type === 'streaming-complete'));
    const types = all.map((m) => m.type);
    const text = all.filter((m) => m.type === 'streaming-response').map((m) => m.payload.text).join('');
    expect(text).toBe('Scripted answer to "Where am I? [[scripted:call=get_location({"precise":true})]]" using 1 tool result(s): Oslo');
    expect(all.find((m) => m.type === 'tool-output')!.payload).toMatchObject({ tool_name: 'get_location', success: true, output: 'Oslo' });
    expect(types.indexOf('token-count')).toBeLessThan(types.indexOf('streaming-complete'));
    expect(all.find((m) => m.type === 'token-count')!.payload.total_tokens).toBeGreaterThan(0);
    expect(all.find((m) => m.type === 'streaming-complete')!.payload.final_response).toBe(text);
    expect(types.indexOf('tool-call')).toBeLessThan(types.indexOf('streaming-response'));
    client.ws.close();
  });

  it('a reconnecting socket naming its conversation_ref picks the session up where it was', async () => {
    const first = new Client();
    await first.open();
    first.send(handshake('bob'));
    first.envelope('query', { text: 'Locate me [[scripted:call=get_location({})]]', conversation_ref: 'conv-b' });
    const call = (await first.waitFor((all) => all.some((m) => m.type === 'tool-call'))).find((m) => m.type === 'tool-call')!;
    first.ws.close();
    await first.closed;

    const second = new Client();
    await second.open();
    second.send(handshake('bob'));
    second.envelope('query', { text: 'And the weather?', conversation_ref: 'conv-b' });
    // The call the first socket never answered is sent again, with the same request id.
    const resent = (await second.waitFor((all) => all.some((m) => m.type === 'tool-call'))).find((m) => m.type === 'tool-call')!;
    expect(resent.payload.request_id).toBe(call.payload.request_id);
    second.envelope('tool-result', { request_id: resent.payload.request_id, success: true, data: { output: 'Bergen' } });
    const all = await second.waitFor((msgs) => msgs.filter((m) => m.type === 'streaming-complete').length >= 2);
    const finals = all.filter((m) => m.type === 'streaming-complete').map((m) => m.payload.final_response);
    expect(finals[0]).toMatch(/using 1 tool result\(s\): Bergen$/);
    // The query sent while that turn waited ran right after it, in the same conversation.
    expect(finals[1]).toMatch(/^Scripted answer to "And the weather\?"/);
    second.ws.close();
  });

  it('bad frames get an error message and leave the conversation as it was; settings and models', async () => {
    const client = new Client();
    await client.open();
    client.send(handshake('carol'));
    const errors = () => client.messages.filter((m) => m.type === 'error').map((m) => m.payload.message as string);
    const expectError = async (send: () => void, pattern: RegExp) => {
      const before = client.count('error');
      send();
      await client.waitFor(() => client.count('error') > before);
      expect(errors().at(-1)).toMatch(pattern);
    };
    await expectError(() => client.send('not json'), /invalid JSON/);
    await expectError(() => client.send({ id: '1', type: 'list-models', payload: {}, extra: true }), /unknown top-level field "extra"/);
    await expectError(() => client.envelope('launch-rockets', {}), /unknown message type/);
    await expectError(() => client.envelope('wakeword-detected', {}), /outside Cadre/);
    await expectError(() => client.envelope('query', { text: 'look', conversation_ref: 'c', screenshot_ref: 'x.jpg' }), /screenshots are outside Cadre/);
    await expectError(() => client.envelope('query', { conversation_ref: 'c' }), /payload.text is required/);
    await expectError(() => client.envelope('tool-result', { request_id: 'bogus', success: true }), /request_id/);
    await expectError(() => client.envelope('tool-bundle-result', { bundle_id: 'b', status: 'success', step_results: [] }), /no tool bundle is pending/);
    await expectError(() => client.envelope('update-settings', { selected_model_id: 'gpt-nope' }), /configured models/);
    const tooMany = Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`provider-${i}`, { enabled: true }]));
    await expectError(() => client.envelope('update-settings', { provider_api_keys: tooMany }), /at most 32 providers/);

    client.envelope('update-settings', { selected_model_id: 'cadre-scripted', provider_api_keys: { openai: { enabled: true, api_key: 'sk-secret-123' } } });
    await client.waitFor((all) => all.some((m) => m.type === 'settings-updated'));
    client.envelope('load-settings', {});
    const loaded = (await client.waitFor((all) => all.some((m) => m.type === 'settings-loaded'))).find((m) => m.type === 'settings-loaded')!;
    expect(loaded.payload.config).toMatchObject({ selected_model_id: 'cadre-scripted', provider_api_keys: { openai: { enabled: true, api_key: '' } } });
    expect(JSON.stringify(client.messages)).not.toContain('sk-secret-123');
    client.envelope('list-models', {});
    const models = (await client.waitFor((all) => all.some((m) => m.type === 'models-listed'))).find((m) => m.type === 'models-listed')!;
    expect(models.payload.online.map((m: { id: string }) => m.id)).toEqual(['cadre-scripted']);

    // Nothing above started a conversation: rehydrate then query runs on the replaced history.
    client.envelope('rehydrate-conversation', { conversation_ref: 'conv-c', rehydrate_mode: 'replace', messages: [{ role: 'user', content: 'Earlier' }, { role: 'assistant', content: 'Earlier reply' }] });
    client.envelope('query', { text: 'Now', conversation_ref: 'conv-c' });
    const done = await client.waitFor((all) => all.some((m) => m.type === 'streaming-complete'));
    expect(done.find((m) => m.type === 'streaming-complete')!.payload.final_response).toMatch(/^Scripted answer to "Now"/);
    client.ws.close();
  });

  it('a client that sends many requests without waiting for the answers gets every one answered, in order', async () => {
    const client = new Client();
    await client.open();
    client.send(handshake('hal'));
    // Sent in one go: they reach the gateway together, faster than it answers them one at a time, and far more
    // than a socket keeps waiting (32): it stops reading until they are handled, and is not closed (f6a4a8d: 1008).
    const expected = sendBurst(client, 100);
    const answers = () => client.messages.filter((m) => m.type !== 'client-tool-manifest');
    const done = client.waitFor(() => answers().length >= expected.length).then(() => ({ code: 0, reason: 'all answered' }));
    const { code, reason } = await Promise.race([client.closed, done]);
    expect({ code, reason }).toEqual({ code: 0, reason: 'all answered' });
    expect(answers().map(answerOf)).toEqual(expected);
    client.ws.close();
  });

  it('a conversation belongs to the key that opened it: another key claiming the same user_id and ref is refused', async () => {
    const owner = new Client();
    await owner.open();
    owner.send(handshake('dave'));
    owner.envelope('query', { text: 'Secret plans [[scripted:call=get_location({})]]', conversation_ref: 'conv-d' });
    const call = (await owner.waitFor((all) => all.some((m) => m.type === 'tool-call'))).find((m) => m.type === 'tool-call')!;

    // The same workspace ('windie'), another key, the same claimed user_id: neither the ref nor the call is its.
    const intruder = new Client(WINDIE_KEY);
    await intruder.open();
    intruder.send(handshake('dave'));
    intruder.envelope('query', { text: 'Show me', conversation_ref: 'conv-d' });
    await intruder.waitFor((all) => all.some((m) => m.type === 'error'));
    intruder.envelope('tool-result', { request_id: call.payload.request_id, success: true, data: { output: 'forged' } });
    intruder.envelope('rehydrate-conversation', { conversation_ref: 'conv-d', rehydrate_mode: 'replace', messages: [] });
    const errors = (await intruder.waitFor((all) => all.filter((m) => m.type === 'error').length >= 3)).filter((m) => m.type === 'error').map((m) => m.payload.message);
    expect(errors).toEqual([
      'conversation_ref "conv-d" belongs to another key',
      'this conversation belongs to another key',
      'conversation_ref "conv-d" belongs to another key',
    ]);
    // Another workspace's key does not see the session at all.
    const stranger = new Client(OTHER_KEY);
    await stranger.open();
    stranger.send(handshake('dave'));
    stranger.envelope('tool-result', { request_id: call.payload.request_id, success: true, data: { output: 'forged' } });
    const [strangerError] = (await stranger.waitFor((all) => all.some((m) => m.type === 'error'))).filter((m) => m.type === 'error');
    expect(strangerError!.payload.message).toMatch(/not found/);
    expect(intruder.messages.concat(stranger.messages).some((m) => m.type === 'tool-call' || m.type === 'streaming-response')).toBe(false);

    // The owner's conversation is as it was: its call still waits, and its answer is the owner's.
    owner.envelope('tool-result', { request_id: call.payload.request_id, success: true, data: { output: 'Tromsø' } });
    const done = await owner.waitFor((all) => all.some((m) => m.type === 'streaming-complete'));
    expect(done.find((m) => m.type === 'streaming-complete')!.payload.final_response).toMatch(/using 1 tool result\(s\): Tromsø$/);
    for (const c of [owner, intruder, stranger]) c.ws.close();
  });
});

describe('/ws conversation bindings', () => {
  it('a conversation in use keeps its binding; one whose session expired is re-bound to a new session', async () => {
    const conversations = new KeyBuilder(stack.prefix).conversations('windie');
    const boundSession = async () => (await redis.hget(conversations, 'conv-f'))?.split(' ').at(-1);
    const client = new Client();
    await client.open();
    client.send(handshake('fay'));
    const answered = (n: number) => client.waitFor((all) => all.filter((m) => m.type === 'streaming-complete').length >= n);
    client.envelope('query', { text: 'First', conversation_ref: 'conv-f' });
    await answered(1);
    const first = await boundSession();
    expect(first).toBeDefined();

    // No new conversation bound for (almost) a whole idle TTL while this one is in use: its queries keep the binding.
    await redis.expire(conversations, 5);
    client.envelope('query', { text: 'Second', conversation_ref: 'conv-f' });
    await answered(2);
    expect(await redis.ttl(conversations)).toBeGreaterThan(3600);
    expect(await boundSession()).toBe(first);

    // The session expires (every key of it goes) while its binding stays: the ref starts a new session, as a new ref does.
    const sessionKeys = await keysMatching(redis, `${stack.prefix}:{s:${first}}:*`);
    expect(sessionKeys.length).toBeGreaterThan(0);
    await redis.del(...sessionKeys);
    client.envelope('query', { text: 'Third', conversation_ref: 'conv-f' });
    const all = await answered(3);
    expect(all.filter((m) => m.type === 'streaming-complete').at(-1)!.payload.final_response).toMatch(/^Scripted answer to "Third"/);
    expect(all.filter((m) => m.type === 'error').map((m) => m.payload.message)).not.toContainEqual(expect.stringMatching(/session .* not found/));
    const second = await boundSession();
    expect(second).not.toBe(first);
    expect((await httpClient(stack.url).get(`/api/sessions/${second}`)).status).toBe(200);
    client.ws.close();
  });
});

describe('/ws approvals (Cadre\'s approval-request / approval-response pair)', () => {
  it('asks before a client tool; approval-response lets the tool-call go out; a reconnecting socket gets the request again', async () => {
    const put = await httpClient(stack.url).request('PUT', '/api/workspaces/elsewhere/approval-policy', { rules: [{ tool: 'get_location', action: 'ask', reason: 'location is private', timeout_secs: 120 }] });
    expect(put.status).toBe(200);
    const first = new Client(OTHER_KEY);
    await first.open();
    first.send(handshake('dora'));
    first.envelope('query', { text: 'Where? [[scripted:call=get_location({"precise":false})]]', conversation_ref: 'conv-appr' });
    const ask = (await first.waitFor((all) => all.some((m) => m.type === 'approval-request'))).find((m) => m.type === 'approval-request')!;
    expect(ask.payload).toMatchObject({ tool_name: 'get_location', parameters: { precise: false }, reason: 'location is private', timeout_secs: 120, metadata: { index: 1, count: 1 } });
    // Nothing was sent to the client to run while the approval waits.
    expect(first.messages.some((m) => m.type === 'tool-call')).toBe(false);
    first.ws.close();
    await first.closed;

    const second = new Client(OTHER_KEY);
    await second.open();
    second.send(handshake('dora'));
    second.envelope('query', { text: 'Still there?', conversation_ref: 'conv-appr' });
    const again = (await second.waitFor((all) => all.some((m) => m.type === 'approval-request'))).find((m) => m.type === 'approval-request')!;
    expect(again.payload.request_id).toBe(ask.payload.request_id);
    second.envelope('approval-response', { request_id: ask.payload.request_id, approved: true });
    const call = (await second.waitFor((all) => all.some((m) => m.type === 'tool-call'))).find((m) => m.type === 'tool-call')!;
    expect(second.messages.find((m) => m.type === 'approval-resolved')!.payload).toMatchObject({ request_id: ask.payload.request_id, approved: true, status: 'approved' });
    // A second answer is refused with an error and changes nothing; so is a malformed one.
    second.envelope('approval-response', { request_id: ask.payload.request_id, approved: false });
    second.envelope('approval-response', { request_id: ask.payload.request_id, approved: 'yes' });
    const errors = await second.waitFor((msgs) => msgs.filter((m) => m.type === 'error').length >= 2);
    expect(errors.filter((m) => m.type === 'error').map((m) => m.payload.message)).toEqual([expect.stringContaining('already approved'), expect.stringContaining('approved must be a boolean')]);
    second.envelope('tool-result', { request_id: call.payload.request_id, success: true, data: { output: 'Bodø' } });
    const all = await second.waitFor((msgs) => msgs.some((m) => m.type === 'streaming-complete'));
    expect(all.find((m) => m.type === 'streaming-complete')!.payload.final_response).toMatch(/using 1 tool result\(s\): Bodø$/);
    second.ws.close();
  });

  it('approval-response with a modifier: one the tool\'s schema refuses is an error and leaves it pending; an accepted one is the tool-call\'s parameters', async () => {
    const put = await httpClient(stack.url).request('PUT', '/api/workspaces/elsewhere/approval-policy', { rules: [{ tool: 'get_location', action: 'ask', reason: 'location is private', timeout_secs: 120 }] });
    expect(put.status).toBe(200);
    const client = new Client(OTHER_KEY);
    await client.open();
    client.send(handshake('erin'));
    client.envelope('query', { text: 'Where exactly? [[scripted:call=get_location({"precise":false})]]', conversation_ref: 'conv-amend' });
    const ask = (await client.waitFor((all) => all.some((m) => m.type === 'approval-request'))).find((m) => m.type === 'approval-request')!;
    const requestId = ask.payload.request_id as string;

    client.envelope('approval-response', { request_id: requestId, approved: true, modifier: { precise: 'very' } });
    client.envelope('approval-response', { request_id: requestId, approved: true, modifier: [true] });
    client.envelope('approval-response', { request_id: requestId, approved: false, modifier: { precise: true } });
    const errors = (await client.waitFor((msgs) => msgs.filter((m) => m.type === 'error').length >= 3)).filter((m) => m.type === 'error').map((m) => m.payload.message);
    expect(errors).toEqual([
      expect.stringMatching(/modifier does not fit get_location's arguments: \/precise must be boolean/),
      expect.stringContaining('payload.modifier must be an object'),
      expect.stringContaining('a denial takes none'),
    ]);
    const pending = await httpClient(stack.url, OTHER_KEY).get<{ approval: { status: string } }>(`/api/approvals/${requestId}`);
    expect(pending.body.approval.status).toBe('pending');
    expect(client.count('approval-resolved')).toBe(0);

    client.envelope('approval-response', { request_id: requestId, approved: true, modifier: { precise: true } });
    const call = (await client.waitFor((all) => all.some((m) => m.type === 'tool-call'))).find((m) => m.type === 'tool-call')!;
    expect(call.payload.parameters).toEqual({ precise: true });
    expect(client.messages.find((m) => m.type === 'approval-resolved')!.payload).toMatchObject({ request_id: requestId, approved: true, status: 'approved', modifier: { precise: true } });
    client.envelope('tool-result', { request_id: call.payload.request_id, success: true, data: { output: 'Hammerfest, exactly' } });
    const all = await client.waitFor((msgs) => msgs.some((m) => m.type === 'streaming-complete'));
    expect(all.find((m) => m.type === 'streaming-complete')!.payload.final_response).toMatch(/using 1 tool result\(s\): Hammerfest, exactly$/);
    client.ws.close();
  });
});

describe('/ws backpressure (invariant 3, as tests/backpressure.int.test.ts for gRPC and SSE)', () => {
  const BUFFER = 16;
  /** Far more than every socket buffer between gateway and client holds. */
  const BURST = 1000;
  const DELTA = 'x'.repeat(16 * 1024);
  let slow: TestStack;
  let slowRedis: TestRedisClient;
  let store: SessionStore;

  /** Models enough that each list-models answer is larger than what a socket holds unsent before it waits (64 KiB). */
  const MODELS = Array.from({ length: 256 }, (_, i) => `model-${i}-`.padEnd(60, 'x'));
  /** Requests a client sends without reading, each PAD bytes: far more than the TCP buffers of both ends hold. */
  const FLOOD = 1_000;
  const PAD = 32 * 1024;

  // No worker: the test holds the turn and appends its events itself, paced by the socket that reads.
  beforeAll(async () => {
    slow = await TestStack.start({ workers: 0, env: { CADRE_WATCHER_BUFFER: String(BUFFER), CADRE_MODELS: MODELS.join(',') } });
    slowRedis = slow.redis.connect();
    store = new SessionStore({ redis: slowRedis, keys: new KeyBuilder(slow.prefix) });
  });
  afterAll(async () => {
    slowRedis?.disconnect();
    await slow?.stop();
  });

  it('a socket whose client stops reading is told and closed 1013 once it falls too far behind; another socket of the conversation gets it all', async () => {
    const stalled = new Client(TEST_API_KEY, slow.url);
    await stalled.open();
    stalled.send(handshake('gus'));
    stalled.envelope('query', { text: 'A long answer, please', conversation_ref: 'conv-slow' });
    const conversations = new KeyBuilder(slow.prefix).conversations('windie');
    const sessionId = await waitUntil('the conversation is bound', async () => (await slowRedis.hget(conversations, 'conv-slow'))?.split(' ').at(-1));
    // The turn started, so the socket watches the session (it attaches before it sends): now it stops reading.
    const wake = await waitUntil('the turn is queued', () => store.unclaimedWake(sessionId));
    stalled.ws.pause();

    const reader = new Client(TEST_API_KEY, slow.url);
    await reader.open();
    reader.send(handshake('gus'));
    reader.envelope('query', { text: 'And then this', conversation_ref: 'conv-slow' });
    // Queued behind the running turn, after the socket attached.
    await waitUntil('the reader watches', async () => (await store.getSession(sessionId))!.queued_follow_ups.length === 1);

    const lease = randomUUID();
    expect((await store.claimTurn(sessionId, wake, lease, 'test-host')).kind).toBe('taken');
    for (let i = 0; i < BURST; i++) {
      await store.commitTurn(sessionId, lease, { events: [{ event_type: 'text_delta', payload: { message_id: 'm1', content: DELTA } }] });
      // The reader is never more than half the buffer behind: only the socket that stopped reading can overflow.
      await reader.waitFor(() => i - reader.count('streaming-response') < BUFFER / 2);
    }
    const usage = { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 };
    await store.finishTurn(sessionId, lease, { fields: { turn_usage: JSON.stringify(usage) } }, 'end_turn');
    const done = await reader.waitFor((all) => all.some((m) => m.type === 'streaming-complete'));
    expect(reader.count('streaming-response')).toBe(BURST);
    expect(done.find((m) => m.type === 'streaming-complete')!.payload.final_response).toHaveLength(BURST * DELTA.length);

    stalled.ws.resume();
    // Closed, or (without a bound) fed the whole answer.
    const answered = stalled.waitFor((all) => all.some((m) => m.type === 'streaming-complete')).then(() => ({ code: 0, reason: 'answered' }), () => ({ code: -1, reason: 'neither' }));
    const { code, reason } = await Promise.race([stalled.closed, answered]);
    expect(code).toBe(1013);
    expect(reason).toMatch(/reconnect and query the conversation_ref/);
    // It was cut off, not fed: what it got ends with the error that says what to do, and no answer.
    expect(stalled.messages.at(-1)).toMatchObject({ type: 'error', payload: { message: expect.stringContaining(`/api/sessions/${sessionId}/messages`) } });
    expect(stalled.count('streaming-response')).toBeLessThan(BURST / 2);
    expect(stalled.count('streaming-complete')).toBe(0);
    reader.ws.close();
  });

  it('a client that sends requests without reading the answers is held back by TCP, then answered in order once it reads', async () => {
    const client = new Client(TEST_API_KEY, slow.url);
    await client.open();
    client.send(handshake('ida'));
    await client.waitFor((all) => all.some((m) => m.type === 'client-tool-manifest'));
    // A client that stops reading: the answers fill the socket, the gateway stops answering, then stops reading
    // once 32 requests wait, so the client's writes (their callbacks) stall far short of the flood.
    client.ws.pause();
    let taken = 0;
    const expected = sendBurst(client, FLOOD, PAD, () => taken++);
    await untilStill(() => taken, FLOOD);
    // Without the pause the gateway took every request into its memory (f6a4a8d closed the socket 1008 instead).
    expect(taken).toBeLessThan(FLOOD / 2);

    // Once it reads, every request is answered, in the order sent, on the same socket.
    client.ws.resume();
    const answers = () => client.messages.filter((m) => m.type !== 'client-tool-manifest');
    await client.waitFor(() => answers().length >= FLOOD, 60_000);
    expect(taken).toBe(FLOOD);
    expect(answers().map(answerOf)).toEqual(expected);
    expect(client.ws.readyState).toBe(WebSocket.OPEN);
    client.ws.close();
  });
});
