// The deployment files agree with the code: the Kubernetes manifests (base and the overlays) are valid
// against the Kubernetes and KEDA schemas, each Deployment, compose service and Dockerfile target gets only variables
// its own app reads, KEDA gets the Redis credentials the pods get, the stop deadlines exceed the apps' drains, and
// every command they run is the one the npm scripts run.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { Ajv } from 'ajv';
import * as apps from 'kubernetes-models/apps/v1';
import * as core from 'kubernetes-models/v1';
import * as networking from 'kubernetes-models/networking.k8s.io/v1';
import * as policy from 'kubernetes-models/policy/v1';
import * as keda from '@kubernetes-models/keda/keda.sh/v1alpha1';
import { gatewayConfig } from '../apps/gateway/src/config.ts';
import { workerConfig } from '../apps/worker/src/config.ts';
import { vmAgentConfig } from '../apps/vm-agent/src/config.ts';

const REPO = fileURLToPath(new URL('../', import.meta.url));
const K8S = join(REPO, 'deploy/k8s');
type Manifest = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string; labels?: Record<string, string> }; [key: string]: unknown };
type Kustomization = { resources?: string[]; namespace?: string; images?: { name: string; newName?: string; newTag?: string }[]; patches?: { path: string }[]; labels?: { pairs: Record<string, string> }[] };

const MODELS: Record<string, new (data: never) => { validate(): void }> = {
  'apps/v1/Deployment': apps.Deployment,
  'v1/ConfigMap': core.ConfigMap,
  'v1/Secret': core.Secret,
  'v1/Service': core.Service,
  'policy/v1/PodDisruptionBudget': policy.PodDisruptionBudget,
  'networking.k8s.io/v1/NetworkPolicy': networking.NetworkPolicy,
  'keda.sh/v1alpha1/ScaledObject': keda.ScaledObject,
  'keda.sh/v1alpha1/TriggerAuthentication': keda.TriggerAuthentication,
};

const readYaml = (file: string): Manifest[] =>
  parseAllDocuments(readFileSync(file, 'utf8')).map((d) => d.toJSON() as Manifest).filter(Boolean);

/**
 * Renders a kustomization with the subset of kustomize these files use (resources, namespace, images, labels,
 * strategic-merge patches where lists of named items merge by name and other lists are replaced). The test refuses
 * any other field, so a feature this renderer does not model cannot slip in unchecked.
 */
function render(dir: string): Manifest[] {
  const k = parse(readFileSync(join(dir, 'kustomization.yaml'), 'utf8')) as Kustomization;
  const unsupported = Object.keys(k).filter((f) => !['apiVersion', 'kind', 'resources', 'namespace', 'images', 'patches', 'labels'].includes(f));
  expect(unsupported, `${dir}: kustomize fields this test does not model`).toEqual([]);
  let out: Manifest[] = [];
  for (const r of k.resources ?? []) out.push(...(r.endsWith('.yaml') ? readYaml(join(dir, r)) : render(join(dir, r))));
  for (const p of k.patches ?? []) {
    for (const patch of readYaml(join(dir, p.path))) {
      const i = out.findIndex((m) => m.kind === patch.kind && m.metadata.name === patch.metadata.name);
      expect(i, `${p.path} patches ${patch.kind}/${patch.metadata.name}, which the base does not have`).toBeGreaterThanOrEqual(0);
      out[i] = merge(out[i], patch) as Manifest;
    }
  }
  out = out.map((m) => {
    const labels = Object.assign({}, ...(k.labels ?? []).map((l) => l.pairs)) as Record<string, string>;
    return { ...m, metadata: { ...m.metadata, ...(k.namespace ? { namespace: k.namespace } : {}), labels: { ...m.metadata.labels, ...labels } } };
  });
  for (const image of k.images ?? []) {
    for (const c of containers(out)) {
      if (c.image === image.name) c.image = `${image.newName ?? image.name}${image.newTag ? `:${image.newTag}` : ''}`;
    }
  }
  return out;
}

function merge(base: unknown, patch: unknown): unknown {
  if (Array.isArray(base) && Array.isArray(patch)) {
    const named = (xs: unknown[]) => xs.every((x) => typeof x === 'object' && x !== null && 'name' in x);
    if (!named(base) || !named(patch)) return patch;
    const result = [...base] as { name: string }[];
    for (const item of patch as { name: string }[]) {
      const i = result.findIndex((x) => x.name === item.name);
      if (i >= 0) result[i] = merge(result[i], item) as { name: string };
      else result.push(item);
    }
    return result;
  }
  if (typeof base === 'object' && base !== null && typeof patch === 'object' && patch !== null && !Array.isArray(base)) {
    const result: Record<string, unknown> = { ...(base as Record<string, unknown>) };
    for (const [key, value] of Object.entries(patch)) result[key] = key in result ? merge(result[key], value) : value;
    return result;
  }
  return patch;
}

type EnvVar = { name: string; value?: string; valueFrom?: { secretKeyRef?: KeyRef; configMapKeyRef?: KeyRef } };
type KeyRef = { name: string; key: string };
type Container = {
  name: string; image: string; command?: string[]; env?: EnvVar[];
  envFrom?: { configMapRef?: { name: string }; secretRef?: { name: string } }[];
};
function containers(manifests: Manifest[]): Container[] {
  return manifests
    .filter((m) => m.kind === 'Deployment')
    .flatMap((m) => (m as unknown as { spec: { template: { spec: { containers: Container[] } } } }).spec.template.spec.containers);
}

/** Every variable name an app's configuration reads (string literals of the config modules). */
function variablesTheAppsRead(): Set<string> {
  const files = [
    ...readdirSync(join(REPO, 'apps')).map((a) => join(REPO, 'apps', a, 'src/config.ts')).filter((f) => existsSync(f)),
    ...readdirSync(join(REPO, 'libs/config/src')).filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts')).map((f) => join(REPO, 'libs/config/src', f)),
  ];
  const names = new Set<string>();
  for (const file of files) {
    for (const m of readFileSync(file, 'utf8').matchAll(/'([A-Z][A-Z0-9_]{2,})'/g)) names.add(m[1]!);
  }
  return names;
}

const OVERLAYS = ['overlays/example', 'overlays/redis-cluster', 'overlays/redis-sentinel'];

/** Each Deployment's app, as its configuration reads the environment. */
const APP_CONFIG: Record<string, (env: Record<string, string>) => unknown> = {
  'cadre-gateway': gatewayConfig,
  'cadre-worker': workerConfig,
};

/**
 * The variables an app's configuration reads from `env` (every lookup, whatever it finds). Given the environment a
 * process gets, a variable it gets but the app never looks up is one set for nothing.
 */
function variablesRead(config: (env: Record<string, string>) => unknown, env: Record<string, string>): Set<string> {
  const read = new Set<string>();
  const spy = new Proxy(env, { get: (target, name) => (typeof name === 'string' && read.add(name), target[name as string]) });
  try {
    config(spy);
  } catch {
    // A configuration that refuses this env (a required variable missing) has still looked up every name.
  }
  return read;
}

const secretData = (manifests: Manifest[], name: string) =>
  (manifests.find((m) => m.kind === 'Secret' && m.metadata.name === name) as { stringData?: Record<string, string> } | undefined)?.stringData;
const configMapData = (manifests: Manifest[], name: string) =>
  (manifests.find((m) => m.kind === 'ConfigMap' && m.metadata.name === name) as { data?: Record<string, string> } | undefined)?.data;

/**
 * The environment a Deployment's container gets, each variable with the Secret it comes from (if any), resolved as
 * the kubelet does: envFrom in order, then env. A ConfigMap or Secret the render does not have fails the test.
 */
function deploymentEnv(manifests: Manifest[], deployment: string): Map<string, { value: string; secret?: string }> {
  const d = manifests.find((m) => m.kind === 'Deployment' && m.metadata.name === deployment);
  expect(d, `Deployment/${deployment}`).toBeDefined();
  const out = new Map<string, { value: string; secret?: string }>();
  for (const c of containers([d!])) {
    for (const from of c.envFrom ?? []) {
      const secret = from.secretRef?.name;
      const data = secret ? secretData(manifests, secret) : configMapData(manifests, from.configMapRef!.name);
      expect(data, `${deployment} envFrom ${JSON.stringify(from)}`).toBeDefined();
      for (const [name, value] of Object.entries(data!)) out.set(name, { value, ...(secret ? { secret } : {}) });
    }
    for (const e of c.env ?? []) {
      const ref = e.valueFrom?.secretKeyRef ?? e.valueFrom?.configMapKeyRef;
      const value = ref ? (e.valueFrom?.secretKeyRef ? secretData : configMapData)(manifests, ref.name)?.[ref.key] : e.value;
      expect(value, `${deployment} env ${e.name}`).toBeDefined();
      out.set(e.name, { value: value!, ...(e.valueFrom?.secretKeyRef ? { secret: ref!.name } : {}) });
    }
  }
  return out;
}
const envValues = (env: Map<string, { value: string }>) => Object.fromEntries([...env].map(([n, v]) => [n, v.value]));

describe('Kubernetes manifests', () => {
  for (const target of ['base', ...OVERLAYS]) {
    it(`${target} renders to objects valid against the Kubernetes and KEDA schemas`, () => {
      const manifests = render(join(K8S, target));
      const withPassword = ['overlays/redis-cluster', 'overlays/redis-sentinel'].includes(target);
      expect(manifests.map((m) => `${m.kind}/${m.metadata.name}`).sort()).toEqual([
        'ConfigMap/cadre-config', 'Deployment/cadre-gateway', 'Deployment/cadre-worker', 'NetworkPolicy/cadre-gateway',
        'NetworkPolicy/cadre-worker', 'PodDisruptionBudget/cadre-gateway', 'ScaledObject/cadre-worker',
        'Secret/cadre-gateway-secrets', 'Secret/cadre-redis', 'Secret/cadre-worker-secrets', 'Service/cadre-gateway',
        ...(withPassword ? ['TriggerAuthentication/cadre-redis'] : []),
      ]);
      for (const m of manifests) {
        const Model = MODELS[`${m.apiVersion}/${m.kind}`];
        expect(Model, `no schema for ${m.apiVersion} ${m.kind}`).toBeDefined();
        expect(() => new Model!(m as never).validate(), `${m.kind}/${m.metadata.name}`).not.toThrow();
      }
    });
  }

  it('the example overlay puts everything in its namespace, pins images and gives the workers more CPU', () => {
    const manifests = render(join(K8S, 'overlays/example'));
    expect(manifests.every((m) => m.metadata.namespace === 'cadre')).toBe(true);
    expect(containers(manifests).map((c) => c.image).sort()).toEqual(['ghcr.io/example/cadre-gateway:0.1.0', 'ghcr.io/example/cadre-worker:0.1.0']);
    const worker = manifests.find((m) => m.kind === 'Deployment' && m.metadata.name === 'cadre-worker')!;
    const [container] = containers([worker]) as (Container & { resources: { requests: { cpu: string } } })[];
    expect(container!.resources.requests.cpu).toBe('1');
    // The patch merged into the named container instead of replacing the list.
    expect(container!.env?.map((e) => e.name)).toEqual(['CADRE_SHUTDOWN_GRACE_MS', 'WORKER_CONCURRENCY', 'WORKER_METRICS_PORT']);
  });

  it.each([
    ['overlays/example', 'single'],
    ['overlays/redis-cluster', 'cluster'],
    ['overlays/redis-sentinel', 'sentinel'],
  ])('%s points the apps at Redis as the %s kind (read by their own configuration)', (target, mode) => {
    const manifests = render(join(K8S, target));
    expect(gatewayConfig(envValues(deploymentEnv(manifests, 'cadre-gateway'))).redis?.mode).toBe(mode);
    expect(workerConfig(envValues(deploymentEnv(manifests, 'cadre-worker'))).redis?.mode).toBe(mode);
  });

  // A probe on a port the container does not declare, or one its app does not listen on, fails every time: the
  // kubelet would restart a healthy pod and never call it ready.
  it.each(['base', ...OVERLAYS])('%s probes each Deployment: liveness /healthz, readiness /readyz, on the port its app serves them on', (target) => {
    const manifests = render(join(K8S, target));
    type Probe = { httpGet: { path: string; port: string | number }; periodSeconds: number; failureThreshold: number };
    type Probed = Container & { ports: { name: string; containerPort: number }[]; livenessProbe?: Probe; readinessProbe?: Probe };
    const served: Record<string, number> = {
      'cadre-gateway': gatewayConfig(envValues(deploymentEnv(manifests, 'cadre-gateway'))).port,
      'cadre-worker': workerConfig(envValues(deploymentEnv(manifests, 'cadre-worker'))).metricsPort,
    };
    for (const [deployment, port] of Object.entries(served)) {
      const [container] = containers(manifests.filter((m) => m.kind === 'Deployment' && m.metadata.name === deployment)) as Probed[];
      for (const [probe, path] of [['livenessProbe', '/healthz'], ['readinessProbe', '/readyz']] as const) {
        const where = `${target} ${deployment} ${probe}`;
        const get = container![probe]?.httpGet;
        expect(get?.path, where).toBe(path);
        const named = container!.ports.find((p) => p.name === get!.port);
        expect(typeof get!.port === 'number' ? get!.port : named?.containerPort, where).toBe(port);
      }
      expect(port, deployment).toBeGreaterThan(0);
      // Liveness gives up later than readiness: a slow moment takes a pod out of rotation before it restarts it.
      const window = (p: Probe): number => p.periodSeconds * p.failureThreshold;
      expect(window(container!.livenessProbe!), deployment).toBeGreaterThan(window(container!.readinessProbe!));
    }
  });

  // The worker runs model code and tools: it must not hold the keys that open the API and stop every run.
  it.each(['base', ...OVERLAYS])('%s gives each Deployment only variables its own app reads (no other app\'s keys)', (target) => {
    const manifests = render(join(K8S, target));
    const unread = Object.entries(APP_CONFIG).map(([deployment, config]) => {
      const env = envValues(deploymentEnv(manifests, deployment));
      const read = variablesRead(config, env);
      return [deployment, Object.keys(env).filter((n) => !read.has(n))];
    });
    expect(Object.fromEntries(unread)).toEqual({ 'cadre-gateway': [], 'cadre-worker': [] });
    const workerEnv = deploymentEnv(manifests, 'cadre-worker');
    for (const key of ['CADRE_API_KEY', 'RUNS_API_KEY', 'RUNS_CONTROL_API_KEY']) expect(workerEnv.has(key), key).toBe(false);
  });

  // KEDA reads Redis itself: without the pods' credentials its trigger fails with NOAUTH and the workers never scale.
  it.each(['base', ...OVERLAYS])('%s gives every KEDA trigger the Redis credentials the workers read, from the same Secret key', (target) => {
    const manifests = render(join(K8S, target));
    const PARAMETER: Record<string, string> = { REDIS_USERNAME: 'username', REDIS_PASSWORD: 'password', REDIS_SENTINEL_PASSWORD: 'sentinelPassword' };
    const credentials = [...deploymentEnv(manifests, 'cadre-worker')].filter(([name, v]) => name in PARAMETER && v.value !== '');
    // The overlays for a Cluster and for Sentinel set a password; the others have none (or it is in REDIS_URL).
    expect(credentials.length > 0).toBe(['overlays/redis-cluster', 'overlays/redis-sentinel'].includes(target));
    type Trigger = { type: string; authenticationRef?: { name: string; kind?: string } };
    type SecretTargetRef = { parameter: string; name: string; key: string };
    for (const scaled of manifests.filter((m) => m.kind === 'ScaledObject')) {
      for (const trigger of (scaled as unknown as { spec: { triggers: Trigger[] } }).spec.triggers) {
        const where = `${target} ScaledObject/${scaled.metadata.name} ${trigger.type}`;
        if (credentials.length === 0) continue;
        expect(trigger.authenticationRef, where).toBeDefined();
        expect(trigger.authenticationRef!.kind ?? 'TriggerAuthentication', where).toBe('TriggerAuthentication');
        const auth = manifests.find((m) => m.kind === 'TriggerAuthentication' && m.metadata.name === trigger.authenticationRef!.name
          && m.metadata.namespace === scaled.metadata.namespace);
        expect(auth, `${where}: TriggerAuthentication/${trigger.authenticationRef!.name} in its namespace`).toBeDefined();
        const refs = (auth as unknown as { spec: { secretTargetRef?: SecretTargetRef[] } }).spec.secretTargetRef ?? [];
        for (const [name, { secret }] of credentials) {
          if (name === 'REDIS_SENTINEL_PASSWORD' && trigger.type !== 'redis-sentinel') continue;
          expect(refs, `${where}: ${name}`).toContainEqual({ parameter: PARAMETER[name], name: secret, key: name });
        }
      }
    }
  });

  // Every apply would reset the count KEDA's HPA chose.
  it.each(['base', ...OVERLAYS])('%s leaves the replicas of a Deployment KEDA scales to KEDA', (target) => {
    const manifests = render(join(K8S, target));
    for (const scaled of manifests.filter((m) => m.kind === 'ScaledObject')) {
      const name = (scaled as unknown as { spec: { scaleTargetRef: { name: string } } }).spec.scaleTargetRef.name;
      const d = manifests.find((m) => m.kind === 'Deployment' && m.metadata.name === name) as unknown as { spec: { replicas?: number } };
      expect(d, name).toBeDefined();
      expect(d.spec.replicas, name).toBeUndefined();
    }
  });

  it('the ConfigMap says what it holds (the shared settings, not every setting)', () => {
    const text = readFileSync(join(K8S, 'base/config.yaml'), 'utf8');
    expect(text).not.toMatch(/\bevery\b/i);
    const data = configMapData(render(join(K8S, 'base')), 'cadre-config')!;
    // Shared: each of its variables is read by both apps (one app's settings are in its Deployment).
    for (const config of Object.values(APP_CONFIG)) {
      const read = variablesRead(config, data);
      expect(Object.keys(data).filter((n) => !read.has(n))).toEqual([]);
    }
  });

  it.each(OVERLAYS)('%s sets only variables the apps read', (target) => {
    const known = variablesTheAppsRead();
    const manifests = render(join(K8S, target));
    const set = new Set<string>();
    for (const m of manifests) {
      const data = (m as { data?: Record<string, string>; stringData?: Record<string, string> });
      if (m.kind === 'ConfigMap') Object.keys(data.data ?? {}).forEach((n) => set.add(n));
      if (m.kind === 'Secret') Object.keys(data.stringData ?? {}).forEach((n) => set.add(n));
    }
    for (const c of containers(manifests)) for (const e of c.env ?? []) set.add(e.name);
    expect([...set].filter((n) => !known.has(n))).toEqual([]);
  });
});

describe('docker-compose.yml and the Dockerfile', () => {
  // `merge`: the services' `<<: *build` (YAML 1.1 merge keys, which Compose resolves).
  const compose = parse(readFileSync(join(REPO, 'docker-compose.yml'), 'utf8'), { merge: true }) as {
    services: Record<string, { command?: string[]; environment?: Record<string, string>; build?: { target?: string }; stop_grace_period?: string }>;
  };
  const APPS: Record<string, (env: Record<string, string>) => { shutdownGraceMs: number }> = {
    gateway: gatewayConfig,
    worker: workerConfig,
    'vm-agent': vmAgentConfig,
  };
  /** The ENV a Dockerfile target sets: its own stage's and those it is built FROM. */
  const dockerfileEnv = (target: string): Record<string, string> => {
    const stages = new Map(dockerfile.split(/^FROM /m).slice(1).map((s) => [/ AS (\S+)\n/.exec(s)![1]!, s] as const));
    const env: Record<string, string> = {};
    for (let stage = stages.get(target); stage !== undefined; stage = stages.get(/^(\S+) AS /.exec(stage)![1]!)) {
      for (const [, pairs] of stage.matchAll(/^ENV (.+)$/gm)) {
        for (const [, name, value] of pairs!.matchAll(/([A-Z_][A-Z0-9_]*)=(\S+)/g)) env[name!] ??= value!;
      }
    }
    return env;
  };
  /** A compose duration (`1m30s`, `20s`) in ms. */
  const durationMs = (d: string): number => {
    const m = /^(?:(\d+)m)?(?:(\d+)s)?$/.exec(d);
    expect(m && d !== '', `duration ${d}`).toBeTruthy();
    return (Number(m![1] ?? 0) * 60 + Number(m![2] ?? 0)) * 1000;
  };
  const scripts = (JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
  const dockerfile = readFileSync(join(REPO, 'deploy/Dockerfile'), 'utf8');

  // The Compose Specification's own schema, as shipped with the docker-compose client (testcontainers' dependency).
  it('is valid against the Compose Specification', () => {
    const schema = JSON.parse(readFileSync(join(REPO, 'node_modules/docker-compose/schema/compose-spec.json'), 'utf8')) as object;
    // validateSchema: ajv does not bundle the draft-07 meta-schema the file names by URL.
    const validate = new Ajv({ strict: false, allErrors: true, validateSchema: false }).compile(schema);
    expect(validate(compose) ? [] : validate.errors).toEqual([]);
  });

  it('sets only variables the apps read', () => {
    const known = variablesTheAppsRead();
    const set = Object.values(compose.services).flatMap((s) => Object.keys(s.environment ?? {}));
    expect(set.length).toBeGreaterThan(0);
    expect(set.filter((n) => !known.has(n))).toEqual([]);
  });

  // Docker's default is 10 s, the gateway's own drain: a call still in flight would be SIGKILLed at its deadline.
  // 6 s: the most a worker's close may take past its deadline with Redis gone (README "Shutdown").
  it.each(Object.keys(APPS))('gives %s a stop_grace_period above its drain deadline plus margin', (name) => {
    const service = compose.services[name]!;
    expect(service.build?.target).toBe(name);
    const drainMs = APPS[name]!({ ...dockerfileEnv(name), ...service.environment }).shutdownGraceMs;
    expect(service.stop_grace_period, name).toBeDefined();
    expect(durationMs(service.stop_grace_period!)).toBeGreaterThanOrEqual(drainMs + 6_000);
  });

  // NODE_ENV is Node's and its libraries', not an app setting.
  it.each(Object.keys(APPS))('sets in the Dockerfile target %s only variables that app reads', (target) => {
    const { NODE_ENV, ...env } = dockerfileEnv(target);
    expect(NODE_ENV).toBe('production');
    const read = variablesRead(APPS[target]!, env);
    expect(Object.keys(env).filter((n) => !read.has(n))).toEqual([]);
  });

  it('runs each app with the command its npm script runs', () => {
    const byCommand = new Set(Object.values(scripts));
    for (const [name, service] of Object.entries(compose.services)) {
      // Services built from our Dockerfile run our code; the others (redis) run their image's own.
      if (service.build && service.command) expect(byCommand, `compose service ${name}`).toContain(service.command.join(' '));
    }
    for (const target of ['gateway', 'worker', 'vm-agent']) {
      const stage = dockerfile.split(/^FROM /m).find((s) => s.startsWith(`runtime AS ${target}\n`));
      const cmd = /^CMD (\[.*\])$/m.exec(stage ?? '')?.[1];
      expect(cmd, `Dockerfile target ${target}`).toBeDefined();
      expect((JSON.parse(cmd!) as string[]).join(' ')).toBe(scripts[target]);
    }
  });
});
