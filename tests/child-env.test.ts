import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { gatewayConfig } from '../apps/gateway/src/config.ts';
import { workerConfig } from '../apps/worker/src/config.ts';
import { vmAgentConfig } from '../apps/vm-agent/src/config.ts';
import { CHILD_ENV_ALLOW_LIST, CHILD_NODE_ARGS, childEnv, type ChildRole } from '../apps/stack/src/child-env.ts';

/** The names a config function reads, recorded through a proxy environment. */
function namesRead(read: (env: Record<string, string | undefined>) => unknown): string[] {
  const seen = new Set<string>();
  read(new Proxy({}, { get: (_t, name) => (typeof name === 'string' && seen.add(name), undefined) }));
  return [...seen].sort();
}

describe("npm start's child environments", () => {
  const configs: Record<ChildRole, (env: Record<string, string | undefined>) => unknown> = { gateway: gatewayConfig, worker: workerConfig, 'vm-agent': vmAgentConfig };

  it.each(Object.keys(configs) as ChildRole[])('let through every variable the %s reads', (role) => {
    const read = namesRead(configs[role]);
    expect(read.length).toBeGreaterThan(5);
    const passed = childEnv(role, Object.fromEntries(read.map((n) => [n, 'x'])));
    // A new variable in an app's config.ts must also be added to CHILD_ENV_ALLOW_LIST (apps/stack/src/child-env.ts).
    expect(read.filter((n) => !(n in passed)), 'variables read by the config but not passed by npm start').toEqual([]);
  });

  it("keep the control plane's secrets and unrelated variables from the roles that do not read them", () => {
    const env = {
      PATH: '/usr/bin', REDIS_URL: 'redis://:pw@h:1', CADRE_API_KEY: 'tasks', CADRE_API_KEYS: 'ws:k', RUNS_API_KEY: 'runs',
      RUNS_CONTROL_API_KEY: 'control', OPENAI_API_KEY: 'model', AWS_SECRET_ACCESS_KEY: 'cloud', GITHUB_TOKEN: 'gh', OTEL_SERVICE_NAME: 'x',
    };
    expect(Object.keys(childEnv('vm-agent', env)).sort()).toEqual(['OPENAI_API_KEY', 'OTEL_SERVICE_NAME', 'PATH', 'RUNS_API_KEY']);
    expect(Object.keys(childEnv('worker', env)).sort()).toEqual(['OPENAI_API_KEY', 'OTEL_SERVICE_NAME', 'PATH', 'REDIS_URL']);
    expect(Object.keys(childEnv('gateway', env)).sort()).toEqual(['CADRE_API_KEY', 'CADRE_API_KEYS', 'OTEL_SERVICE_NAME', 'PATH', 'REDIS_URL', 'RUNS_API_KEY', 'RUNS_CONTROL_API_KEY']);
    expect(CHILD_ENV_ALLOW_LIST['vm-agent']).not.toContain('REDIS_URL');
  });
});

describe("the gateway's V8 flags", () => {
  const repoFile = (path: string): string => readFileSync(new URL(`../${path}`, import.meta.url), 'utf8');
  const flags = CHILD_NODE_ARGS.gateway;

  it('fix its young generation: capped, and never shrunk below the cap', () => {
    const size = (flag: string): string | undefined => flags.find((f) => f.startsWith(`--${flag}=`))?.split('=')[1];
    expect(size('max-semi-space-size')).toMatch(/^\d+$/);
    expect(size('min-semi-space-size')).toBe(size('max-semi-space-size'));
  });

  // npm start passes CHILD_NODE_ARGS itself and the benches import them; these two spell them out.
  it('are the same for `npm run gateway` and the container image as for npm start', () => {
    const scripts = (JSON.parse(repoFile('package.json')) as { scripts: Record<string, string> }).scripts;
    expect(scripts.gateway).toBe(['node', ...flags, 'apps/gateway/src/main.ts'].join(' '));
    const gatewayStage = repoFile('deploy/Dockerfile').split(/^FROM runtime AS gateway$/m)[1]!;
    const cmd = /^CMD (\[.*\])$/m.exec(gatewayStage)?.[1];
    expect(JSON.parse(cmd ?? 'null')).toEqual(['node', ...flags, 'apps/gateway/src/main.ts']);
  });
});
