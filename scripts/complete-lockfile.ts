// Adds the other platforms' optional packages to package-lock.json.
//
// Why: the registry this project is built against serves only the Linux builds of packages that ship one
// package per platform (@nx/nx-*, @bufbuild/buf-*, @msgpackr-extract/*), so `npm install` leaves the other
// platforms out of the lock, and `npm ci` then refuses the lock as out of sync ("Missing: ... from lock file").
// Each missing entry is written as npm writes it on a full registry: optional, tagged with its os/cpu(/libc),
// so installs on other platforms skip it. Run after changing dependencies: `npm run lock:complete`.
import { readFileSync, writeFileSync } from 'node:fs';

interface LockEntry {
  version?: string;
  optional?: boolean;
  os?: string[];
  cpu?: string[];
  libc?: string[];
  optionalDependencies?: Record<string, string>;
}

const file = new URL('../package-lock.json', import.meta.url);
const lock = JSON.parse(readFileSync(file, 'utf8')) as { packages: Record<string, LockEntry> };

/** os/cpu/libc from the platform words package names use (darwin-arm64, linux-arm-gnueabihf, win32-x64-msvc). */
function platformOf(name: string): Pick<LockEntry, 'os' | 'cpu' | 'libc'> {
  const os = ['darwin', 'win32', 'freebsd', 'android', 'openbsd', 'sunos', 'aix'].find((o) => name.includes(o)) ?? 'linux';
  const cpu = /arm64|aarch64/.test(name) ? 'arm64' : /armv7|-arm(-|$)/.test(name) ? 'arm' : /ia32/.test(name) ? 'ia32' : 'x64';
  return { os: [os], cpu: [cpu], ...(name.includes('musl') ? { libc: ['musl'] } : {}) };
}

let added = 0;
for (const [path, entry] of Object.entries(lock.packages)) {
  for (const [name, version] of Object.entries(entry.optionalDependencies ?? {})) {
    const nested = path === '' ? `node_modules/${name}` : `${path}/node_modules/${name}`;
    if (lock.packages[nested] || lock.packages[`node_modules/${name}`]) continue;
    lock.packages[`node_modules/${name}`] = { version, optional: true, ...platformOf(name) };
    added++;
  }
}
lock.packages = Object.fromEntries(Object.entries(lock.packages).sort(([a], [b]) => (a === '' ? -1 : b === '' ? 1 : a.localeCompare(b))));
writeFileSync(file, `${JSON.stringify(lock, null, 2)}\n`);
console.log(`package-lock.json: added ${added} platform-specific optional package entries`);
