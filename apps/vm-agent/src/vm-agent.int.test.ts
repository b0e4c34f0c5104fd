import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertContiguous, isProcessAlive, runsCall } from '@cadre/testing';
import { TestStack } from '../../../tests/support/stack.ts';

// A real vm-agent OS process against a real gateway, Redis and scripted model.
const RUNS_KEY = 'k';
const REPO = fileURLToPath(new URL('../../../', import.meta.url));
let stack: TestStack;
let workdir: string;
let agent: ChildProcess;
let agentOutput = '';
const workerId = `vm-int-${randomUUID().slice(0, 8)}`;
/** Secrets the agent process holds that a run's tools must not see. */
const CANARIES = { CADRE_API_KEY: `canary-tasks-${randomUUID()}`, RUNS_CONTROL_API_KEY: `canary-control-${randomUUID()}`, SOME_CLOUD_TOKEN: `canary-cloud-${randomUUID()}` };

interface RunEvent {
  seq: number;
  event_type: string;
  source: string;
  payload: any;
}

const call = (method: string, path: string, body?: unknown) => runsCall(stack.url, RUNS_KEY, method, path, body);

async function createRun(query: string): Promise<string> {
  const res = await call('POST', '/api/runs/', { workspace_id: 'default', query, requested_by: 'int-test' });
  expect(res.status).toBe(200);
  return res.body.run.run_id;
}

const events = async (runId: string): Promise<RunEvent[]> => (await call('GET', `/api/runs/${runId}/events?limit=1000`)).body.events;
const status = async (runId: string): Promise<string> => (await call('GET', `/api/runs/${runId}`)).body.status;

async function waitFor<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const value = await probe();
    if (value !== undefined && value !== false) return value;
    await sleep(25);
  }
  throw new Error(`timed out waiting for ${what}\nvm-agent output:\n${agentOutput.slice(-4000)}`);
}

const waitForEvent = (runId: string, pred: (e: RunEvent) => boolean, what: string): Promise<RunEvent> =>
  waitFor(what, async () => (await events(runId)).find(pred));



beforeAll(async () => {
  stack = await TestStack.start({ workers: 0, env: { RUNS_API_KEY: RUNS_KEY, RUNS_HEARTBEAT_INTERVAL_MS: '100', RUNS_WORKER_TTL_MS: '1500' } });
  workdir = await mkdtemp(join(tmpdir(), 'vm-agent-int-'));
  agent = spawn(process.execPath, ['apps/vm-agent/src/main.ts'], {
    cwd: REPO,
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      CADRE_GATEWAY_URL: stack.url,
      RUNS_API_KEY: RUNS_KEY,
      VM_AGENT_WORKER_ID: workerId,
      VM_AGENT_WORKDIR: workdir,
      VM_AGENT_SHELL_TIMEOUT_MS: '60000',
      VM_AGENT_SHUTDOWN_GRACE_MS: '300',
      OPENAI_BASE_URL: stack.model.url,
      OPENAI_API_KEY: 'scripted',
      LOG_LEVEL: 'info',
      ...CANARIES,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  agent.stdout!.on('data', (c: Buffer) => (agentOutput += c.toString()));
  agent.stderr!.on('data', (c: Buffer) => (agentOutput += c.toString()));
  await waitFor('the start line', async () => {
    if (agent.exitCode !== null) throw new Error(`vm-agent exited (${agent.exitCode}):\n${agentOutput}`);
    return agentOutput.includes(`vm-agent ${workerId} serving workspace default via ${stack.url}\n`);
  });
});

afterAll(async () => {
  if (agent && agent.exitCode === null) agent.kill('SIGKILL');
  await stack?.stop();
  if (workdir) await rm(workdir, { recursive: true, force: true });
});

describe('vm-agent: a real process executing runs', () => {
  it('executes a run end to end: dispatch, tools in the run directory, events in order, completed', async () => {
    const runId = await createRun(
      'Leave a note [[scripted:call=shell({"command":"echo hi > out.txt"})]] ' +
        '[[scripted:call=write_file({"path":"notes/a.txt","content":"alpha"})]] [[scripted:call=read_file({"path":"notes/a.txt"})]]',
    );
    await waitForEvent(runId, (e) => e.event_type === 'streaming-complete' || e.event_type === 'error', 'the run to end');
    expect(await status(runId)).toBe('completed');

    const log = await events(runId);
    assertContiguous(log.map((e) => e.seq));
    expect(log.map((e) => [e.event_type, e.source])).toEqual([
      ['run-created', 'api'],
      ['run-worker-assigned', 'backend'],
      ['run-dispatched', 'worker'],
      ['turn-started', 'vm-agent'],
      ['tool-call', 'vm-agent'],
      ['tool-result', 'vm-agent'],
      ['turn-started', 'vm-agent'],
      ['tool-call', 'vm-agent'],
      ['tool-result', 'vm-agent'],
      ['turn-started', 'vm-agent'],
      ['tool-call', 'vm-agent'],
      ['tool-result', 'vm-agent'],
      ['turn-started', 'vm-agent'],
      ['assistant-message', 'vm-agent'],
      ['streaming-complete', 'vm-agent'],
    ]);
    const byType = (t: string) => log.filter((e) => e.event_type === t).map((e) => e.payload);
    expect(log[1]!.payload).toMatchObject({ worker_id: workerId });
    expect(log[2]!.payload).toMatchObject({ worker_id: workerId, conversation_ref: `run-${runId}` });
    expect(byType('turn-started')).toEqual([{ turn: 1 }, { turn: 2 }, { turn: 3 }, { turn: 4 }]);
    expect(byType('tool-call').map((p) => p.tool)).toEqual(['shell', 'write_file', 'read_file']);
    expect(byType('tool-result')).toEqual([
      { tool: 'shell', call_id: 'call_0_0', ok: true, output: 'exit code: 0\nstdout:\n(empty)\nstderr:\n(empty)' },
      { tool: 'write_file', call_id: 'call_1_0', ok: true, output: 'wrote 5 bytes to notes/a.txt' },
      { tool: 'read_file', call_id: 'call_2_0', ok: true, output: 'alpha' },
    ]);
    expect(byType('assistant-message')[0].content).toMatch(/^Scripted answer to "Leave a note/);
    expect(byType('streaming-complete')[0]).toMatchObject({ usage: { total_tokens: expect.any(Number) }, turns: 4 });

    expect(await readFile(join(workdir, runId, 'out.txt'), 'utf8')).toBe('hi\n');
    expect(await readFile(join(workdir, runId, 'notes/a.txt'), 'utf8')).toBe('alpha');
  });

  it("runs a run's shell with an environment of its own: none of the agent's variables reach a tool-result", async () => {
    const runId = await createRun('Show the environment [[scripted:call=shell({"command":"env; echo key=$RUNS_API_KEY model=$OPENAI_API_KEY"})]]');
    await waitForEvent(runId, (e) => e.event_type === 'streaming-complete' || e.event_type === 'error', 'the run to end');
    const results = (await events(runId)).filter((e) => e.event_type === 'tool-result');
    expect(results).toHaveLength(1);
    const output: string = results[0]!.payload.output;
    expect(output).toMatch(/^PATH=/m);
    expect(output).toContain('key= model=');
    for (const canary of Object.values(CANARIES)) expect(output).not.toContain(canary);
    expect(output).not.toContain(stack.url);
  });

  it('stop kills the running tool at once; the agent lives on, acknowledges the stop and relays nothing more', async () => {
    const runId = await createRun('Wait a long time [[scripted:call=shell({"command":"sleep 30 & echo $! > sleep.pid; wait"})]]');
    const pidFile = join(workdir, runId, 'sleep.pid');
    await waitFor('the sleep to start', async () => existsSync(pidFile) && (await readFile(pidFile, 'utf8')).trim() !== '');
    const pid = Number((await readFile(pidFile, 'utf8')).trim());
    expect(isProcessAlive(pid)).toBe(true);

    const stopped = await call('POST', `/api/runs/${runId}/control`, { action: 'stop', requested_by: 'operator' });
    expect(stopped.status).toBe(200);
    expect(stopped.body.run.status).toBe('stopped');
    // Delivered on the next heartbeat (100 ms), then the process group is SIGKILLed.
    await waitFor('the sleep to be killed', async () => !isProcessAlive(pid), 3_000);
    expect(agent.exitCode).toBeNull();

    // The acknowledgement of the stop is recorded after the stop (the run stays stopped); nothing follows it.
    await waitFor('the stop to be acknowledged', async () => (await events(runId)).at(-1)?.event_type === 'run-control-applied', 3_000);
    await sleep(300);
    expect(await status(runId)).toBe('stopped');
    const log = await events(runId);
    assertContiguous(log.map((e) => e.seq));
    const stopAt = log.findIndex((e) => e.event_type === 'run-control');
    const stop = log[stopAt]!;
    expect(stop).toMatchObject({ source: 'api', payload: { action: 'stop', status: 'stopped' } });
    expect(log.at(-1)).toMatchObject({ event_type: 'run-control-applied', source: 'vm-agent', payload: { action: 'stop', command_id: stop.payload.command_id } });
    // Between them at most the batch that was on its way when the stop came (recorded late, as any late relay);
    // nothing the killed tool or a later turn would have produced.
    expect(log.slice(stopAt + 1, -1).map((e) => e.event_type).filter((t) => t !== 'turn-started' && t !== 'tool-call')).toEqual([]);
    expect(log.map((e) => e.event_type)).not.toContain('error');
  });

  it('pause parks the run at the next turn boundary; resume lets it complete', async () => {
    const runId = await createRun('Two steps [[scripted:call=shell({"command":"sleep 2; echo one"})]] [[scripted:call=shell({"command":"echo two"})]]');
    await waitForEvent(runId, (e) => e.event_type === 'tool-call', 'the first tool call');
    expect((await call('POST', `/api/runs/${runId}/control`, { action: 'pause' })).status).toBe(200);
    await waitForEvent(runId, (e) => e.event_type === 'run-control-applied' && e.payload.action === 'pause', 'pause to be applied');

    // The running tool finishes, but no new turn starts while paused.
    await waitForEvent(runId, (e) => e.event_type === 'tool-result', 'the first tool result');
    await sleep(600);
    expect(await status(runId)).toBe('paused');
    expect((await events(runId)).filter((e) => e.event_type === 'turn-started')).toHaveLength(1);

    expect((await call('POST', `/api/runs/${runId}/control`, { action: 'resume' })).status).toBe(200);
    await waitForEvent(runId, (e) => e.event_type === 'streaming-complete' || e.event_type === 'error', 'the run to end');
    expect(await status(runId)).toBe('completed');

    const log = await events(runId);
    assertContiguous(log.map((e) => e.seq));
    const types = log.map((e) => (e.event_type.startsWith('run-control') ? `${e.event_type}:${e.payload.action}` : e.event_type));
    expect(types).toEqual([
      'run-created',
      'run-worker-assigned',
      'run-dispatched',
      'turn-started',
      'tool-call',
      'run-control:pause',
      'run-control-applied:pause',
      'tool-result',
      'run-control:resume',
      'run-control-applied:resume',
      'turn-started',
      'tool-call',
      'tool-result',
      'turn-started',
      'assistant-message',
      'streaming-complete',
    ]);
    const applied = log.filter((e) => e.event_type === 'run-control-applied').map((e) => e.payload);
    const commands = log.filter((e) => e.event_type === 'run-control').map((e) => e.payload.command_id);
    expect(applied).toEqual([
      { command_id: commands[0], action: 'pause', control_mode: 'agent_only' },
      { command_id: commands[1], action: 'resume', control_mode: 'agent_only' },
    ]);
  });

  it('human_override parks the run until the mode goes back', async () => {
    const runId = await createRun('Hand over [[scripted:call=shell({"command":"sleep 2; echo one"})]]');
    await waitForEvent(runId, (e) => e.event_type === 'tool-call', 'the first tool call');
    expect((await call('POST', `/api/runs/${runId}/control`, { action: 'set-control-mode', control_mode: 'human_override' })).status).toBe(200);
    await waitForEvent(runId, (e) => e.event_type === 'tool-result', 'the first tool result');
    await sleep(500);
    expect((await events(runId)).filter((e) => e.event_type === 'turn-started')).toHaveLength(1);
    expect(await status(runId)).toBe('running');

    expect((await call('POST', `/api/runs/${runId}/control`, { action: 'set-control-mode', control_mode: 'shared_control' })).status).toBe(200);
    await waitForEvent(runId, (e) => e.event_type === 'streaming-complete', 'the run to complete');
    const applied = (await events(runId)).filter((e) => e.event_type === 'run-control-applied').map((e) => e.payload.control_mode);
    expect(applied).toEqual(['human_override', 'shared_control']);
  });

  it('SIGTERM mid-run hands the run back (lease expires, run requeued) and exits 0', async () => {
    const runId = await createRun('Long [[scripted:call=shell({"command":"sleep 30 & echo $! > sleep.pid; wait"})]]');
    const pidFile = join(workdir, runId, 'sleep.pid');
    await waitFor('the sleep to start', async () => existsSync(pidFile) && (await readFile(pidFile, 'utf8')).trim() !== '');
    const pid = Number((await readFile(pidFile, 'utf8')).trim());

    const exited = new Promise<number | null>((resolve) => agent.once('exit', (code) => resolve(code)));
    agent.kill('SIGTERM');
    expect(await exited).toBe(0);
    await waitFor('the sleep to be killed', async () => !isProcessAlive(pid), 1_000);

    await waitForEvent(runId, (e) => e.event_type === 'run-requeued', 'the run to be requeued');
    expect(await status(runId)).toBe('awaiting_worker');
    const types = (await events(runId)).map((e) => e.event_type);
    expect(types.slice(-2)).toEqual(['run-worker-lost', 'run-requeued']);
    expect(types).not.toContain('error');
    expect((await call('POST', `/api/runs/${runId}/control`, { action: 'stop' })).status).toBe(200);
  });

  it('without VM_AGENT_WORKDIR works in a temp dir of its own (not one shared by every checkout), removed on exit', async () => {
    const own = spawn(process.execPath, ['apps/vm-agent/src/main.ts'], {
      cwd: REPO,
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        CADRE_GATEWAY_URL: stack.url,
        RUNS_API_KEY: RUNS_KEY,
        VM_AGENT_WORKSPACE_ID: 'own-workdir',
        VM_AGENT_WORKER_ID: `${workerId}/own`,
        OPENAI_BASE_URL: stack.model.url,
        OPENAI_API_KEY: 'scripted',
        LOG_LEVEL: 'info',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    own.stdout!.on('data', (c: Buffer) => (out += c.toString()));
    own.stderr!.on('data', (c: Buffer) => (out += c.toString()));
    try {
      const started = await waitFor('its start log line', async () => {
        const line = out.split('\n').find((l) => l.includes('"msg":"vm-agent started"'));
        return line ? (JSON.parse(line) as { workdir: string }) : undefined;
      });
      expect(dirname(started.workdir)).toBe(tmpdir());
      expect(basename(started.workdir)).toMatch(new RegExp(`^cadre-vm-agent-${workerId}_own-\\w{6}$`));
      expect(existsSync(started.workdir)).toBe(true);
      own.kill('SIGTERM');
      const [code] = await once(own, 'exit');
      expect(code, out).toBe(0);
      expect(existsSync(started.workdir)).toBe(false);
    } finally {
      if (own.exitCode === null) own.kill('SIGKILL');
    }
  });
});
