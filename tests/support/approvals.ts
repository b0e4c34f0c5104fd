import { expect } from 'vitest';
import { httpClient } from '@cadre/testing';

/**
 * A named team in `workspaceId` whose workers (one per role, ids `<role>-<n>`) each call `calculate` once, under a
 * task policy that asks for it: each worker parks on one pending approval. Resolves with the task id.
 */
export async function createTaskNeedingApprovals(baseUrl: string, workspaceId: string, roles: string[] = ['calc']): Promise<string> {
  const res = await httpClient(baseUrl).post<{ task: { task_id: string } }>('/api/tasks', {
    workspace_id: workspaceId,
    goal: 'Needs a sign-off',
    team: {
      workers: roles.map((role) => ({ role, instructions: 'Compute. [[scripted:call=calculate({"expression":"6*7"})]]', tools: ['calculate'] })),
      approval_policy: { rules: [{ tool: 'calculate', action: 'ask', reason: 'check the maths' }] },
    },
  });
  expect(res.status).toBe(201);
  return res.body.task.task_id;
}
