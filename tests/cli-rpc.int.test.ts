import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TEST_API_KEY, httpClient, waitUntil } from '@cadre/testing';
import { TestStack } from './support/stack.ts';

const BIN = join(fileURLToPath(new URL('../', import.meta.url)), 'apps/cli/src/main.ts');
let stack: TestStack;

beforeAll(async () => {
  // A second configured model, so set_model has one to switch to.
  stack = await TestStack.start({ workers: 1, env: { CADRE_MODELS: 'cadre-alt' } });
});
afterAll(async () => {
  await stack?.stop();
});

type Line = Record<string, any>;

/** `cadre rpc` as a child process, driven through its stdin and read line by line from its stdout. */
class Rpc {
  readonly child: ChildProcessWithoutNullStreams;
  readonly lines: Line[] = [];
  readonly exited: Promise<number | null>;

  constructor(env: Record<string, string> = {}) {
    // An empty directory: no .cadre/ there, so the gateway and key come from the environment.
    this.child = spawn(process.execPath, [BIN, 'rpc'], {
      cwd: mkdtempSync(join(tmpdir(), 'cadre-rpc-')),
      env: { PATH: process.env.PATH ?? '', CADRE_URL: stack.url, CADRE_API_KEY: TEST_API_KEY, ...env },
    });
    let buffer = '';
    this.child.stdout.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      let nl;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        this.lines.push(JSON.parse(buffer.slice(0, nl)) as Line);
        buffer = buffer.slice(nl + 1);
      }
    });
    this.exited = new Promise((resolve) => this.child.on('exit', (code) => resolve(code)));
  }

  send(command: object | string): void {
    this.child.stdin.write(`${typeof command === 'string' ? command : JSON.stringify(command)}\n`);
  }

  waitFor(pred: (lines: Line[]) => boolean, timeoutMs = 20_000): Promise<Line[]> {
    return waitUntil('cadre rpc to print the awaited lines', () => pred(this.lines) && this.lines, { timeoutMs }).catch((err: Error) => {
      throw new Error(`${err.message}; got ${JSON.stringify(this.lines.slice(-5))}`, { cause: err });
    });
  }

  response(id: string): Promise<Line> {
    return this.waitFor((ls) => ls.some((l) => l.type === 'response' && l.id === id)).then((ls) => ls.find((l) => l.type === 'response' && l.id === id)!);
  }
}

const count = (type: string, n: number) => (ls: Line[]) => ls.filter((l) => l.type === type).length >= n;
const SLOW = '[[scripted:chunk_delay=40]] [[scripted:words=25]]';

describe('cadre rpc (oh-my-pi RPC mode over stdio)', () => {
  it('prompt, a steer mid-turn the next model call sees, follow-ups in both modes, get_state with the queues, abort', async () => {
    const rpc = new Rpc();
    rpc.send({ id: '1', type: 'prompt', message: `Compare X and Y ${SLOW}` });
    expect(await rpc.response('1')).toEqual({ id: '1', type: 'response', command: 'prompt', success: true });
    await rpc.waitFor(count('message_update', 1));
    rpc.send({ id: '2', type: 'steer', message: 'Only price matters' });
    expect((await rpc.response('2')).success).toBe(true);
    await rpc.waitFor(count('agent_end', 1));
    rpc.send({ id: '3', type: 'get_last_assistant_text' });
    expect((await rpc.response('3')).data.text).toMatch(/^Scripted answer to "Only price matters"/);
    expect(rpc.lines.find((l) => l.type === 'input_delivered')).toMatchObject({ kind: 'steer', turn: 1 });

    // Follow-ups one at a time: each its own turn; get_state shows them queued while the turn runs.
    rpc.send({ id: '4', type: 'set_interrupt_mode', mode: 'wait' });
    expect((await rpc.response('4')).success).toBe(true);
    rpc.send({ id: '5', type: 'prompt', message: `Next ${SLOW}` });
    await rpc.waitFor((ls) => ls.filter((l) => l.type === 'turn_start').length >= 2);
    rpc.send({ id: '6', type: 'follow_up', message: 'First follow-up' });
    rpc.send({ id: '7', type: 'prompt', message: 'Second follow-up', streamingBehavior: 'followUp' });
    rpc.send({ id: '8', type: 'steer', message: 'A queued steer' });
    await rpc.response('8');
    rpc.send({ id: '9', type: 'get_state' });
    const state = (await rpc.response('9')).data;
    expect(state).toMatchObject({ isStreaming: true, interruptMode: 'wait', followUpMode: 'one-at-a-time', queuedMessageCount: 3 });
    expect(state.followUpQueue.map((q: { content: string }) => q.content)).toEqual(['First follow-up', 'Second follow-up']);
    expect(state.steeringQueue.map((q: { content: string }) => q.content)).toEqual(['A queued steer']);
    await rpc.waitFor(count('agent_end', 4));
    const turns = rpc.lines.filter((l) => l.type === 'input_delivered').map((l) => [l.kind, l.turn]);
    expect(turns).toEqual([['steer', 1], ['steer', 2], ['follow_up', 3], ['follow_up', 4]]);

    // Mode all: two follow-ups batched into one turn.
    rpc.send({ id: '10', type: 'set_follow_up_mode', mode: 'all' });
    await rpc.response('10');
    rpc.send({ id: '11', type: 'prompt', message: `Again ${SLOW}` });
    await rpc.waitFor((ls) => ls.filter((l) => l.type === 'turn_start').length >= 5);
    rpc.send({ id: '12', type: 'follow_up', message: 'Batch one' });
    rpc.send({ id: '13', type: 'follow_up', message: 'Batch two' });
    await rpc.waitFor(count('agent_end', 6));
    expect(rpc.lines.filter((l) => l.type === 'input_delivered').slice(-2).map((l) => l.turn)).toEqual([6, 6]);

    // Abort: the running turn ends cancelled, the queued follow-up is dropped with its outcome.
    rpc.send({ id: '14', type: 'prompt', message: `Long ${SLOW}` });
    await rpc.waitFor((ls) => ls.filter((l) => l.type === 'turn_start').length >= 7);
    rpc.send({ id: '15', type: 'follow_up', message: 'never runs' });
    await rpc.response('15');
    rpc.send({ id: '16', type: 'abort' });
    expect((await rpc.response('16')).data).toMatchObject({ aborted: true, dropped: 1 });
    const ended = await rpc.waitFor(count('agent_end', 7));
    expect(ended.filter((l) => l.type === 'turn_end').at(-1)!.stopReason).toBe('cancelled');
    expect(ended.find((l) => l.type === 'input_dropped')).toMatchObject({ kind: 'follow_up', reason: 'abort' });

    rpc.child.stdin.end();
    expect(await rpc.exited).toBe(0);
  });

  it('unknown command (no id), parse error, unsupported commands, bad input, bash, stdin close → exit 0', async () => {
    const rpc = new Rpc();
    rpc.send({ id: 'u', type: 'teleport' });
    rpc.send('{not json');
    rpc.send({ id: 'c', type: 'compact' });
    rpc.send({ id: 'p', type: 'prompt', message: '' });
    rpc.send({ id: 'm', type: 'set_steering_mode', mode: 'sometimes' });
    rpc.send({ id: 'b', type: 'bash', command: 'echo hi-from-$((1+1))' });
    const lines = await rpc.waitFor((ls) => ls.some((l) => l.id === 'b'));
    expect(lines.find((l) => l.command === 'teleport')).toEqual({ type: 'response', command: 'teleport', success: false, error: 'Unknown command: teleport' });
    expect(lines.find((l) => l.command === 'parse')).toMatchObject({ type: 'response', success: false });
    expect(lines.find((l) => l.id === 'c')).toMatchObject({ success: false, error: expect.stringMatching(/not supported/) });
    expect(lines.find((l) => l.id === 'p')).toMatchObject({ success: false, error: expect.stringMatching(/message/) });
    expect(lines.find((l) => l.id === 'm')).toMatchObject({ success: false });
    expect(lines.find((l) => l.id === 'b')!.data).toMatchObject({ output: 'hi-from-2\n', exitCode: 0 });
    rpc.child.stdin.end();
    expect(await rpc.exited).toBe(0);
  });

  it('get_available_models, set_model among them (another is "Model not found"), get_messages after a tool turn', async () => {
    const rpc = new Rpc();
    rpc.send({ id: 'none', type: 'get_messages' });
    rpc.send({ id: 'models', type: 'get_available_models' });
    expect((await rpc.response('none')).data).toEqual({ messages: [] });
    expect((await rpc.response('models')).data).toEqual({ models: [{ provider: 'cadre', id: 'cadre-scripted' }, { provider: 'cadre', id: 'cadre-alt' }] });
    rpc.send({ id: 'bad', type: 'set_model', provider: 'cadre', modelId: 'gpt-nope' });
    rpc.send({ id: 'other', type: 'set_model', provider: 'openai', modelId: 'cadre-alt' });
    expect(await rpc.response('bad')).toMatchObject({ command: 'set_model', success: false, error: expect.stringMatching(/^Model not found: cadre\/gpt-nope/) });
    expect(await rpc.response('other')).toMatchObject({ success: false, error: expect.stringMatching(/^Model not found: openai\/cadre-alt/) });
    rpc.send({ id: 'set', type: 'set_model', provider: 'cadre', modelId: 'cadre-alt' });
    expect(await rpc.response('set')).toMatchObject({ success: true, data: { provider: 'cadre', id: 'cadre-alt' } });
    rpc.send({ id: 'state', type: 'get_state' });
    expect((await rpc.response('state')).data.model).toEqual({ provider: 'cadre', id: 'cadre-alt' });

    rpc.send({ id: 'p', type: 'prompt', message: 'What is 6*7? [[scripted:call=calculate({"expression":"6*7"})]]' });
    await rpc.waitFor(count('agent_end', 1));
    rpc.send({ id: 'msgs', type: 'get_messages' });
    const { messages } = (await rpc.response('msgs')).data;
    expect(messages.map((m: Line) => m.role)).toEqual(['user', 'assistant', 'toolResult', 'assistant']);
    expect(messages[0].content).toEqual([{ type: 'text', text: 'What is 6*7? [[scripted:call=calculate({"expression":"6*7"})]]' }]);
    expect(messages[1].content).toContainEqual({ type: 'toolCall', id: expect.any(String), name: 'calculate', arguments: { expression: '6*7' } });
    expect(messages[2]).toMatchObject({ toolCallId: messages[1].content.at(-1).id, isError: false, content: [{ type: 'text', text: '42' }] });
    expect(messages[3].content[0].text).toMatch(/using 1 tool result\(s\): 42$/);
    rpc.child.stdin.end();
    expect(await rpc.exited).toBe(0);
  });

  it('a turn handed back by a draining worker past its deadline: attempt_lost, then message_end with the answer once', async () => {
    const rpc = new Rpc();
    rpc.send({ id: '1', type: 'prompt', message: 'Tell a long story [[scripted:words=300]] [[scripted:chunk_delay=40]]' });
    await rpc.waitFor(count('message_update', 2));
    // The stack's worker pool drains with a short deadline (what SIGTERM does); a new pool resumes the turn.
    const [draining] = stack.pools.splice(0, 1);
    await draining!.close(300);
    await stack.addWorkerPool();
    const lines = await rpc.waitFor(count('agent_end', 1), 60_000);
    expect(lines.filter((l) => l.type === 'attempt_lost')).toEqual([expect.objectContaining({ attempt: 1, reason: 'worker_shutdown' })]);
    const answer = lines.find((l) => l.type === 'message_end')!.message.content as string;
    expect(answer.match(/Scripted answer to/g)).toHaveLength(1);
    expect(answer).toMatch(/w288 scripted model keeps talking so that a long answer fills context$/);
    rpc.send({ id: '2', type: 'get_last_assistant_text' });
    expect((await rpc.response('2')).data.text).toBe(answer);
    rpc.child.stdin.end();
    expect(await rpc.exited).toBe(0);
  }, 90_000);
});

describe('cadre rpc approvals (extension_ui_request confirm, answered by extension_ui_response or approve / deny)', () => {
  it('a tool the workspace asks about is a confirm dialog; confirmed runs it, approve/deny name the approval', async () => {
    const put = await httpClient(stack.url).request('PUT', '/api/workspaces/rpc-appr/approval-policy', { rules: [{ tool: 'current_time', action: 'ask', reason: 'clock access', timeout_secs: 60 }] });
    expect(put.status).toBe(200);
    const rpc = new Rpc({ CADRE_WORKSPACE: 'rpc-appr' });
    rpc.send({ id: 'p1', type: 'prompt', message: 'Time? [[scripted:call=current_time({})]]' });
    const ask = (await rpc.waitFor(count('extension_ui_request', 1))).find((l) => l.type === 'extension_ui_request')!;
    expect(ask).toMatchObject({ method: 'confirm', title: 'Allow current_time?', message: 'clock access: current_time({})', timeout: 60_000, approval: { tool_name: 'current_time', index: 1, count: 1 } });
    expect(rpc.lines.some((l) => l.type === 'tool_execution_start')).toBe(false);
    rpc.send({ type: 'extension_ui_response', id: ask.id, confirmed: true });
    const lines = await rpc.waitFor(count('agent_end', 1));
    const types = lines.map((l) => l.type);
    expect(types.indexOf('approval_resolved')).toBeLessThan(types.indexOf('tool_execution_start'));
    expect(lines.find((l) => l.type === 'approval_resolved')).toMatchObject({ approval_id: ask.id, approved: true, status: 'approved' });
    expect(lines.find((l) => l.type === 'tool_execution_end')).toMatchObject({ toolName: 'current_time', isError: false });

    rpc.send({ id: 'p2', type: 'prompt', message: 'Again [[scripted:call=current_time({})]]' });
    const second = (await rpc.waitFor(count('extension_ui_request', 2))).filter((l) => l.type === 'extension_ui_request')[1]!;
    rpc.send({ id: 'd', type: 'deny', approval_id: second.id, reason: 'no clocks' });
    expect(await rpc.response('d')).toMatchObject({ command: 'deny', success: true, data: { approval_id: second.id, status: 'denied', decision_reason: 'no clocks' } });
    rpc.send({ id: 'again', type: 'approve', approval_id: second.id });
    expect(await rpc.response('again')).toMatchObject({ command: 'approve', success: false, error: expect.stringContaining('already denied') });
    const end = await rpc.waitFor(count('agent_end', 2));
    expect(end.filter((l) => l.type === 'tool_execution_end').at(-1)).toMatchObject({ isError: true, result: 'denied: no clocks' });
    rpc.send({ id: 'bad', type: 'approve' });
    expect(await rpc.response('bad')).toMatchObject({ success: false, error: 'approve: "approval_id" must be a non-empty string' });
    rpc.child.stdin.end();
    expect(await rpc.exited).toBe(0);
  });

  it('approve with a modifier: one the tool\'s schema refuses is a failed response and leaves it pending; an accepted one runs the amended call', async () => {
    const put = await httpClient(stack.url).request('PUT', '/api/workspaces/rpc-amend/approval-policy', { rules: [{ tool: 'calculate', action: 'ask', reason: 'maths', timeout_secs: 60 }] });
    expect(put.status).toBe(200);
    const rpc = new Rpc({ CADRE_WORKSPACE: 'rpc-amend' });
    rpc.send({ id: 'p', type: 'prompt', message: 'Compute [[scripted:call=calculate({"expression":"6*7"})]]' });
    const ask = (await rpc.waitFor(count('extension_ui_request', 1))).find((l) => l.type === 'extension_ui_request')!;
    rpc.send({ id: 'm1', type: 'approve', approval_id: ask.id, modifier: { expression: 5 } });
    expect(await rpc.response('m1')).toMatchObject({ command: 'approve', success: false, error: expect.stringMatching(/modifier does not fit calculate's arguments: \/expression must be string/) });
    rpc.send({ id: 'm2', type: 'approve', approval_id: ask.id, modifier: ['5*5'] });
    expect(await rpc.response('m2')).toMatchObject({ success: false, error: 'approve: "modifier" must be an object (the amended arguments)' });
    rpc.send({ id: 'm3', type: 'deny', approval_id: ask.id, modifier: { expression: '5*5' } });
    expect(await rpc.response('m3')).toMatchObject({ success: false, error: expect.stringContaining('a denial takes none') });
    const pending = await httpClient(stack.url).get<{ approval: { status: string } }>(`/api/approvals/${ask.id}`);
    expect(pending.body.approval.status).toBe('pending');

    rpc.send({ id: 'ok', type: 'approve', approval_id: ask.id, modifier: { expression: '5*5' } });
    expect(await rpc.response('ok')).toMatchObject({ success: true, data: { approval_id: ask.id, status: 'approved', modifier: '{"expression":"5*5"}' } });
    const lines = await rpc.waitFor(count('agent_end', 1));
    expect(lines.find((l) => l.type === 'approval_resolved')).toMatchObject({ approval_id: ask.id, approved: true, modifier: '{"expression":"5*5"}' });
    expect(lines.find((l) => l.type === 'tool_execution_end')).toMatchObject({ toolName: 'calculate', isError: false, result: '25' });
    rpc.child.stdin.end();
    expect(await rpc.exited).toBe(0);
  });
});
