import type { Command } from 'commander';
import pc from 'picocolors';
import type { CadreClient } from '../client.ts';
import { EXIT, printJson } from '../output.ts';

/** `cadre status`: where the CLI points, whether the gateway is up and ready, and what runs in the workspace. */
export function statusCommand(program: Command, client: () => CadreClient): void {
  program
    .command('status')
    .description('the gateway this CLI talks to, its health, and the workspace at a glance')
    .action(async (_opts: unknown, cmd: Command) => {
      const g = cmd.optsWithGlobals<{ json?: boolean; workspace: string }>();
      const c = client();
      // Why the gateway did not answer, when it did not (fetch names the socket error as its cause).
      let unreachable: string | undefined;
      const probe = async (path: string): Promise<boolean> => fetch(`${c.config.url}${path}`).then((r) => r.ok, (err: unknown) => {
        const cause = (err as { cause?: { code?: string; message?: string } }).cause;
        unreachable = cause?.code ?? cause?.message ?? (err as Error).message;
        return false;
      });
      const [healthy, ready] = await Promise.all([probe('/healthz'), probe('/readyz')]);
      const count = async (status: string): Promise<number | null> => {
        if (!healthy || !c.config.apiKey) return null;
        let n = 0;
        let cursor: string | null = null;
        do {
          const page = await c.tasks.list({ workspace_id: g.workspace, status, limit: '200', ...(cursor ? { cursor } : {}) });
          n += page.tasks.length;
          cursor = page.next_cursor;
        } while (cursor && n < 10_000);
        return n;
      };
      const [running, queued] = await Promise.all([count('running'), count('queued')]);
      const report = {
        url: c.config.url, board: `${c.config.url}/`, healthy, ready, workspace: g.workspace,
        tasks: { running, queued }, sources: c.config.sources, ...(unreachable !== undefined && { unreachable }),
      };
      if (g.json) printJson(report);
      else {
        const yes = (b: boolean): string => (b ? pc.green('yes') : pc.red('no'));
        process.stdout.write([
          `gateway    ${c.config.url}  (from ${c.config.sources.url})`,
          `board      ${report.board}`,
          `healthy    ${yes(healthy)}   ready ${yes(ready)}${unreachable !== undefined ? `   (cannot reach it: ${unreachable}; set CADRE_URL, or start one with \`npm start\`)` : ''}`,
          `api key    ${c.config.apiKey ? `set (from ${c.config.sources.apiKey})` : pc.yellow('not set')}`,
          `runs key   ${c.config.runsKey ? `set (from ${c.config.sources.runsKey})` : pc.yellow('not set')}`,
          `control    ${c.config.controlKey ? `set (from ${c.config.sources.controlKey})` : pc.yellow('not set')}  (stop-all)`,
          `workspace  ${g.workspace}: ${running ?? '?'} running, ${queued ?? '?'} queued task(s)`,
        ].join('\n') + '\n');
      }
      if (!healthy) process.exitCode = EXIT.error;
    });
}
