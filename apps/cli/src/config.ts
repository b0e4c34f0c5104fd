import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { HTTP_URL, readConfig, str, url as urlField, type Env } from '@cadre/config';

export interface CliConfig {
  url: string;
  apiKey: string | undefined;
  runsKey: string | undefined;
  controlKey: string | undefined;
  workspace: string;
  /** Where each value came from (for `cadre status`; never the keys themselves). */
  sources: Record<'url' | 'apiKey' | 'runsKey' | 'controlKey', string>;
}

const DEFAULT_URL = 'http://127.0.0.1:8080';

/**
 * The only reader of the environment for the CLI. Each value comes from its variable, else from what `npm start`
 * wrote under its data dir (`CADRE_DATA_DIR`, else the nearest `.cadre/` from the working directory up).
 */
export function cliConfig(env: Env, cwd: string): CliConfig {
  const c = readConfig(env, {
    url: urlField('CADRE_URL', HTTP_URL),
    apiKey: str('CADRE_API_KEY'),
    runsKey: str(['CADRE_RUNS_KEY', 'RUNS_API_KEY', 'WINDIE_RUNS_API_KEY']),
    controlKey: str(['CADRE_RUNS_CONTROL_KEY', 'RUNS_CONTROL_API_KEY', 'WINDIE_RUNS_CONTROL_API_KEY']),
    workspace: str('CADRE_WORKSPACE', 'default'),
    dataDir: str('CADRE_DATA_DIR'),
  });
  const dataDir = c.dataDir ? resolve(cwd, c.dataDir) : findDataDir(cwd);
  const fromFile = (name: string): string | undefined => {
    if (!dataDir) return undefined;
    const file = join(dataDir, name);
    return existsSync(file) ? readFileSync(file, 'utf8').trim() || undefined : undefined;
  };
  const pick = (value: string | undefined, envName: string, file: string): [string | undefined, string] => {
    if (value) return [value, envName];
    const read = fromFile(file);
    return read ? [read, join(dataDir!, file)] : [undefined, 'not set'];
  };
  const [url, urlSource] = pick(c.url, 'CADRE_URL', 'gateway-url');
  const [apiKey, apiKeySource] = pick(c.apiKey, 'CADRE_API_KEY', 'dev-api-key');
  const [runsKey, runsKeySource] = pick(c.runsKey, 'CADRE_RUNS_KEY', 'dev-runs-key');
  const [controlKey, controlKeySource] = pick(c.controlKey, 'CADRE_RUNS_CONTROL_KEY', 'dev-runs-control-key');
  return {
    url: (url ?? DEFAULT_URL).replace(/\/+$/, ''),
    apiKey,
    runsKey,
    controlKey,
    workspace: c.workspace,
    sources: { url: url ? urlSource : `default (${DEFAULT_URL})`, apiKey: apiKeySource, runsKey: runsKeySource, controlKey: controlKeySource },
  };
}

function findDataDir(from: string): string | undefined {
  for (let dir = resolve(from); ; dir = dirname(dir)) {
    if (existsSync(join(dir, '.cadre'))) return join(dir, '.cadre');
    if (dirname(dir) === dir) return undefined;
  }
}
