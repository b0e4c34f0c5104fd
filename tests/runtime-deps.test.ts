// The images install runtime dependencies only (`npm ci --omit=dev`, deploy/Dockerfile): a package the apps and
// their libs import at run time but that is listed only under devDependencies works in every test and in
// `npm start`, and fails the first time a container starts. This reads every import of the shipped source.
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const REPO = fileURLToPath(new URL('../', import.meta.url));
/** Source that ships: every app and lib but the test helpers; tests themselves are left out below. */
const SHIPPED = [...readdirSync(join(REPO, 'apps')).map((d) => join('apps', d, 'src')), ...readdirSync(join(REPO, 'libs')).filter((d) => d !== 'testing').map((d) => join('libs', d, 'src'))];

function sourceFiles(dir: string): string[] {
  return readdirSync(join(REPO, dir), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && /\.ts$/.test(e.name) && !/\.test\.ts$/.test(e.name))
    .map((e) => relative(REPO, join(e.parentPath, e.name)));
}

/** The packages a file loads at run time: `import type` is erased when Node strips the types, so it is not one. */
function runtimePackages(file: string): string[] {
  const text = readFileSync(join(REPO, file), 'utf8');
  const specifiers = [...text.matchAll(/^\s*(?:import|export)\s+(?!type\s)(?:[^'"]*?\sfrom\s+)?['"]([^'"]+)['"]/gm), ...text.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g)].map((m) => m[1]!);
  return specifiers
    .filter((s) => !s.startsWith('.') && !s.startsWith('node:') && !s.startsWith('@cadre/'))
    .map((s) => s.split('/').slice(0, s.startsWith('@') ? 2 : 1).join('/'));
}

describe('runtime dependencies', () => {
  it('lists every package the shipped source imports under dependencies, not only devDependencies', () => {
    const manifest = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
    const missing = new Map<string, string>();
    for (const file of SHIPPED.flatMap(sourceFiles)) {
      for (const pkg of runtimePackages(file)) if (!(pkg in manifest.dependencies)) missing.set(pkg, file);
    }
    expect(Object.fromEntries(missing)).toEqual({});
  });
});
