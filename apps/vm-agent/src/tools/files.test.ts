import { mkdtemp, mkdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PathRefusedError, readFileTool, readConfinedFile, writeConfinedFile, writeFileTool } from './files.ts';

let base: string;
let root: string;
let outside: string;
const ctx = { signal: new AbortController().signal, callId: 'call_1' };

beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), 'vm-agent-files-'));
  root = join(base, 'run');
  outside = join(base, 'outside');
  await mkdir(root);
  await mkdir(outside);
  await writeFile(join(outside, 'secret.txt'), 'top secret');
});
afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

describe('file tools: inside the run directory', () => {
  it('writes (creating parent directories) and reads back', async () => {
    expect(await writeConfinedFile(root, 'notes/today.txt', 'hello')).toBe('wrote 5 bytes to notes/today.txt');
    expect(await readFile(join(root, 'notes/today.txt'), 'utf8')).toBe('hello');
    expect(await readConfinedFile(root, './notes/../notes/today.txt')).toBe('hello');
  });

  it('follows a symbolic link that stays inside', async () => {
    await writeFile(join(root, 'real.txt'), 'inside');
    await symlink(join(root, 'real.txt'), join(root, 'alias.txt'));
    expect(await readConfinedFile(root, 'alias.txt')).toBe('inside');
    await writeConfinedFile(root, 'alias.txt', 'changed');
    expect(await readFile(join(root, 'real.txt'), 'utf8')).toBe('changed');
  });

  it('reports a missing file and truncates a large one', async () => {
    await expect(readConfinedFile(root, 'nope.txt')).rejects.toThrow('no such file: "nope.txt"');
    await writeFile(join(root, 'big.txt'), 'x'.repeat(100));
    expect(await readConfinedFile(root, 'big.txt', 10)).toBe(`${'x'.repeat(10)}\n[truncated: the file has 100 bytes; showing the first 10]`);
  });
});

describe('file tools: confinement', () => {
  it.each(['../outside/secret.txt', '../x', 'a/../../x', '..'])('refuses "%s" (escapes with ..)', async (path) => {
    await expect(readConfinedFile(root, path)).rejects.toThrow(PathRefusedError);
    await expect(writeConfinedFile(root, path, 'pwned')).rejects.toThrow(/escapes the run's working directory/);
    expect(await readFile(join(outside, 'secret.txt'), 'utf8')).toBe('top secret');
  });

  it('refuses absolute paths, even ones inside the run directory', async () => {
    await expect(readConfinedFile(root, '/etc/passwd')).rejects.toThrow(/is absolute/);
    await expect(writeConfinedFile(root, join(root, 'a.txt'), 'x')).rejects.toThrow(/is absolute/);
  });

  it('refuses a symbolic link to a file outside', async () => {
    await symlink(join(outside, 'secret.txt'), join(root, 'link.txt'));
    await expect(readConfinedFile(root, 'link.txt')).rejects.toThrow(/outside the run's working directory through a symbolic link/);
    await expect(writeConfinedFile(root, 'link.txt', 'pwned')).rejects.toThrow(/through a symbolic link/);
    expect(await readFile(join(outside, 'secret.txt'), 'utf8')).toBe('top secret');
  });

  it('refuses a symbolic link to a directory outside, and a dangling link out', async () => {
    await symlink(outside, join(root, 'dir'));
    await expect(readConfinedFile(root, 'dir/secret.txt')).rejects.toThrow(/through a symbolic link/);
    await expect(writeConfinedFile(root, 'dir/new.txt', 'x')).rejects.toThrow(/through a symbolic link/);
    await expect(writeConfinedFile(root, 'dir/sub/new.txt', 'x')).rejects.toThrow(/through a symbolic link/);
    await symlink(join(outside, 'created.txt'), join(root, 'dangling.txt'));
    await expect(writeConfinedFile(root, 'dangling.txt', 'x')).rejects.toThrow(/through a symbolic link/);
    await expect(readFile(join(outside, 'created.txt'))).rejects.toThrow(/ENOENT/);
    await expect(readFile(join(outside, 'new.txt'))).rejects.toThrow(/ENOENT/);
  });

  it('gives the model a clear error through the tool objects', async () => {
    await expect(readFileTool(root).run({ path: '../outside/secret.txt' }, ctx)).rejects.toThrow(/path refused: "..\/outside\/secret.txt" escapes/);
    await expect(writeFileTool(root).run({ path: 'a.txt' }, ctx)).rejects.toThrow('"content" must be a string');
    await expect(readFileTool(root).run({}, ctx)).rejects.toThrow('"path" must be a non-empty string');
  });
});
