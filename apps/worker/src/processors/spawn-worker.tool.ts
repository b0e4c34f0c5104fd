import type { AgentTool } from '@cadre/agent';
import { resolveTools, UnknownToolError } from '@cadre/agent';
import { workerIdFor, type WorkerRecord } from '@cadre/store';

/**
 * The lead's spawn_worker tool (as in roz). It records the workers the lead plans; they start as child jobs of
 * the lead once its plan turn ends. Bounded by the team's max_workers; workers get no spawn_worker of their own,
 * so the team is at most two levels deep.
 */
export function spawnWorkerTool(opts: { maxWorkers: number; firstIndex: number; defaultModel?: string }): {
  tool: AgentTool;
  spawned: WorkerRecord[];
} {
  const spawned: WorkerRecord[] = [];
  const tool: AgentTool = {
    name: 'spawn_worker',
    description: 'Start a worker agent for one part of the goal. It runs in parallel with the other workers; you get all results when they finish.',
    parameters: {
      type: 'object',
      properties: {
        role: { type: 'string', description: 'Short role name, e.g. researcher' },
        instructions: { type: 'string', description: 'What this worker must do' },
        tools: { type: 'array', items: { type: 'string' }, description: 'Builtin tools the worker may use' },
      },
      required: ['role', 'instructions'],
    },
    async run(args) {
      const { role, instructions, tools = [] } = (args ?? {}) as { role?: unknown; instructions?: unknown; tools?: unknown };
      if (typeof role !== 'string' || role.trim() === '' || typeof instructions !== 'string') {
        return 'error: spawn_worker needs a role and instructions (strings)';
      }
      if (!Array.isArray(tools) || !tools.every((t) => typeof t === 'string')) return 'error: tools must be a list of tool names';
      if (spawned.length >= opts.maxWorkers) return `error: max_workers (${opts.maxWorkers}) reached; no more workers can be spawned`;
      try {
        resolveTools(tools);
      } catch (err) {
        if (err instanceof UnknownToolError) return `error: ${err.message}`;
        throw err;
      }
      const worker: WorkerRecord = {
        worker_id: workerIdFor(role, opts.firstIndex + spawned.length),
        role: role.slice(0, 64),
        instructions: instructions.slice(0, 20_000),
        model: opts.defaultModel,
        tools,
        status: 'pending',
        attempt: 0,
      };
      spawned.push(worker);
      return `spawned worker ${worker.worker_id} (${worker.role})`;
    },
  };
  return { tool, spawned };
}
