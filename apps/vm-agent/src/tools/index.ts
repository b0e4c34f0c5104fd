import type { AgentTool } from '@cadre/agent';
import { readFileTool, writeFileTool } from './files.ts';
import { shellTool } from './shell.ts';

/** The tools a run gets on this VM, all working in the run's directory. */
export function vmTools(runDir: string, opts: { shellTimeoutMs: number }): AgentTool[] {
  return [shellTool({ cwd: runDir, timeoutMs: opts.shellTimeoutMs }), readFileTool(runDir), writeFileTool(runDir)];
}
