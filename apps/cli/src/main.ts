#!/usr/bin/env node
// `cadre`: the operator CLI, on the public HTTP APIs only. Each subcommand group lives in its own module under
// commands/ and is added here; nothing else is shared but the client and the output helpers.
import { Command, CommanderError } from 'commander';
import { ConfigError } from '@cadre/config';
import { ApiError, CadreClient, MissingKeyError } from './client.ts';
import { cliConfig } from './config.ts';
import { EXIT, exitQuietlyWhenReaderGoes } from './output.ts';
import { approvalCommands } from './commands/approvals.ts';
import { runCommands } from './commands/run.ts';
import { statusCommand } from './commands/status.ts';
import { taskCommands } from './commands/task.ts';

exitQuietlyWhenReaderGoes(process.stdout);
exitQuietlyWhenReaderGoes(process.stderr);

// A bad variable (e.g. CADRE_URL that is no URL) is a usage error: one line per problem naming it, exit 2.
const config = (() => {
  try {
    return cliConfig(process.env, process.cwd());
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    for (const problem of err.problems) process.stderr.write(`cadre: ${problem}\n`);
    process.exit(EXIT.usage);
  }
})();
let client: CadreClient | undefined;
const getClient = (): CadreClient => (client ??= new CadreClient(config));

const program = new Command('cadre')
  .description(`Operate Cadre from a terminal: team tasks, VM runs, stop-all, tool approvals.\n\nGateway and keys come from CADRE_URL, CADRE_API_KEY, CADRE_RUNS_KEY, CADRE_RUNS_CONTROL_KEY, or from what \`npm start\` wrote under .cadre/.\nExit codes: 0 ok (task completed), 1 error, 2 usage, 3 task failed, 4 task cancelled.`)
  .option('--json', 'JSON output (JSON lines for watch)')
  .option('-w, --workspace <id>', 'workspace (CADRE_WORKSPACE sets the default)', config.workspace)
  .showHelpAfterError()
  .exitOverride();

statusCommand(program, getClient);
taskCommands(program, getClient);
runCommands(program, getClient);
approvalCommands(program, getClient);
program
  .command('rpc')
  .description('oh-my-pi RPC mode: JSON commands on stdin, responses and session events as JSON lines on stdout')
  .action(async () => {
    const { RpcMode } = await import('./rpc/rpc-mode.ts');
    const workspace = (program.opts() as { workspace?: string }).workspace ?? 'rpc';
    await new RpcMode(getClient(), workspace, (line) => process.stdout.write(`${JSON.stringify(line)}\n`)).run(process.stdin);
  });

try {
  await program.parseAsync(process.argv);
} catch (err) {
  process.exitCode = exitCodeOf(err);
}

function exitCodeOf(err: unknown): number {
  if (err instanceof CommanderError) return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
  if (err instanceof ApiError) {
    process.stderr.write(`cadre: ${err.message} (HTTP ${err.status})\n`);
    return err.status === 400 || err.status === 422 ? EXIT.usage : EXIT.error;
  }
  if (err instanceof MissingKeyError || err instanceof ConfigError) {
    process.stderr.write(`cadre: ${err.message}\n`);
    return EXIT.usage;
  }
  // fetch() reports an unreachable server as "fetch failed" with the socket error as its cause.
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  if (err instanceof TypeError && cause) {
    process.stderr.write(`cadre: cannot reach a gateway at ${config.url} (${cause.code ?? cause.message}); set CADRE_URL, or start one with \`npm start\`\n`);
    return EXIT.error;
  }
  process.stderr.write(`cadre: ${(err as Error).message}\n`);
  return EXIT.error;
}
