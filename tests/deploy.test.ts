// The deployment files agree with the code: the Kubernetes manifests (base and the overlays) are valid
// against the Kubernetes and KEDA schemas, every variable they, docker-compose.yml or the Dockerfile set is one an
// app reads, and every command they run is the one the npm scripts run.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import * as apps from 'kubernetes-models/apps/v1';
import * as core from 'kubernetes-models/v1';
import * as networking from 'kubernetes-models/networking.k8s.io/v1';
import * as policy from 'kubernetes-models/policy/v1';
import * as keda from '@kubernetes-models/keda/keda.sh/v1alpha1';
import { gatewayConfig } from '../apps/gateway/src/config.ts';
import { workerConfig } from '../apps/worker/src/config.ts';

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

type Container = { name: string; image: string; command?: string[]; env?: { name: string }[] };
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

/** The environment a pod gets from the rendered ConfigMap and Secret (envFrom both). */
function podEnv(manifests: Manifest[]): Record<string, string> {
  const of = (kind: string) => manifests.find((m) => m.kind === kind) as { data?: Record<string, string>; stringData?: Record<string, string> };
  return { ...of('ConfigMap').data, ...of('Secret').stringData };
}

describe('Kubernetes manifests', () => {
  for (const target of ['base', ...OVERLAYS]) {
    it(`${target} renders to objects valid against the Kubernetes and KEDA schemas`, () => {
      const manifests = render(join(K8S, target));
      expect(manifests.map((m) => `${m.kind}/${m.metadata.name}`).sort()).toEqual([
        'ConfigMap/cadre-config', 'Deployment/cadre-gateway', 'Deployment/cadre-worker', 'NetworkPolicy/cadre-gateway',
        'NetworkPolicy/cadre-worker', 'PodDisruptionBudget/cadre-gateway', 'ScaledObject/cadre-worker', 'Secret/cadre-secrets',
        'Service/cadre-gateway',
      ]);
      for (const m of manifests) {
        const Model = MODELS[`${m.apiVersion}/${m.kind}`];
        expect(Model, `no schema for ${m.apiVersion} ${m.kind}`).toBeDefined();
        expect(() => new Model!(m as never).validate(), `${m.kind}/${m.metadata.name}`).not.toThrow();
      }
    });
  }

  it('the example overlay puts everything in its namespace, pins images and scales the workers', () => {
    const manifests = render(join(K8S, 'overlays/example'));
    expect(manifests.every((m) => m.metadata.namespace === 'cadre')).toBe(true);
    expect(containers(manifests).map((c) => c.image).sort()).toEqual(['ghcr.io/example/cadre-gateway:0.1.0', 'ghcr.io/example/cadre-worker:0.1.0']);
    const worker = manifests.find((m) => m.kind === 'Deployment' && m.metadata.name === 'cadre-worker') as unknown as { spec: { replicas: number } };
    expect(worker.spec.replicas).toBe(4);
    // The patch merged into the named container instead of replacing the list.
    expect(containers([worker as unknown as Manifest])[0]!.env?.map((e) => e.name)).toEqual(['CADRE_SHUTDOWN_GRACE_MS']);
  });

  it.each([
    ['overlays/example', 'single'],
    ['overlays/redis-cluster', 'cluster'],
    ['overlays/redis-sentinel', 'sentinel'],
  ])('%s points the apps at Redis as the %s kind (read by their own configuration)', (target, mode) => {
    const env = podEnv(render(join(K8S, target)));
    expect(gatewayConfig(env).redis?.mode).toBe(mode);
    expect(workerConfig(env).redis?.mode).toBe(mode);
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
  const compose = parse(readFileSync(join(REPO, 'docker-compose.yml'), 'utf8')) as {
    services: Record<string, { command?: string[]; environment?: Record<string, string>; build?: { target?: string } }>;
  };
  const scripts = (JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
  const dockerfile = readFileSync(join(REPO, 'deploy/Dockerfile'), 'utf8');

  it('sets only variables the apps read', () => {
    const known = variablesTheAppsRead();
    const set = Object.values(compose.services).flatMap((s) => Object.keys(s.environment ?? {}));
    expect(set.length).toBeGreaterThan(0);
    expect(set.filter((n) => !known.has(n))).toEqual([]);
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
