import { constants } from 'node:fs';
import { lstat, mkdir, open, realpath } from 'node:fs/promises';
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import type { AgentTool } from '@cadre/agent';

// read_file and write_file see only the run's working directory: a path is relative to it, may not climb out
// with `..`, and may not leave it through a symbolic link (checked on the real path, and the final open refuses
// a link with O_NOFOLLOW). This confines the file tools, not the VM: the shell tool can reach anything the
// agent's user can.

export class PathRefusedError extends Error {
  override name = 'PathRefusedError';
  readonly code = 'path_refused';
}

const MAX_READ_BYTES = 256 * 1024;
const MAX_WRITE_BYTES = 5 * 1024 * 1024;

const within = (root: string, path: string): boolean => path === root || path.startsWith(root.endsWith(sep) ? root : root + sep);
const isNotFound = (err: unknown): boolean => (err as NodeJS.ErrnoException).code === 'ENOENT';

/** The lexical path `requested` names inside `root`, or a PathRefusedError saying why not. */
export function confine(root: string, requested: unknown): string {
  if (typeof requested !== 'string' || requested.trim() === '') throw new Error('"path" must be a non-empty string');
  if (requested.includes('\0')) throw new PathRefusedError('path refused: it contains a NUL byte');
  if (isAbsolute(requested)) {
    throw new PathRefusedError(`path refused: "${requested}" is absolute; give a path relative to the run's working directory`);
  }
  const path = resolve(root, requested);
  const rel = relative(root, path);
  if (rel === '') throw new PathRefusedError(`path refused: "${requested}" is the working directory itself, not a file`);
  if (rel === '..' || rel.startsWith(`..${sep}`) || isAbsolute(rel)) {
    throw new PathRefusedError(`path refused: "${requested}" escapes the run's working directory`);
  }
  return path;
}

function outsideThroughLink(requested: string): PathRefusedError {
  return new PathRefusedError(`path refused: "${requested}" leads outside the run's working directory through a symbolic link`);
}

export async function readConfinedFile(root: string, requested: unknown, maxBytes = MAX_READ_BYTES): Promise<string> {
  const path = confine(root, requested);
  const realRoot = await realpath(root);
  let real: string;
  try {
    real = await realpath(path);
  } catch (err) {
    if (isNotFound(err)) throw new Error(`no such file: "${String(requested)}"`, { cause: err });
    throw err;
  }
  if (!within(realRoot, real)) throw outsideThroughLink(String(requested));
  const file = await open(real, constants.O_RDONLY | constants.O_NOFOLLOW);
  try {
    const stat = await file.stat();
    if (!stat.isFile()) throw new Error(`"${String(requested)}" is not a regular file`);
    const buffer = Buffer.alloc(Math.min(stat.size, maxBytes));
    const { bytesRead } = await file.read(buffer, 0, buffer.length, 0);
    const text = buffer.subarray(0, bytesRead).toString('utf8');
    return stat.size > maxBytes ? `${text}\n[truncated: the file has ${stat.size} bytes; showing the first ${maxBytes}]` : text;
  } finally {
    await file.close();
  }
}

export async function writeConfinedFile(root: string, requested: unknown, content: unknown): Promise<string> {
  if (typeof content !== 'string') throw new Error('"content" must be a string');
  if (Buffer.byteLength(content) > MAX_WRITE_BYTES) throw new Error(`"content" is larger than ${MAX_WRITE_BYTES} bytes`);
  const path = confine(root, requested);
  const realRoot = await realpath(root);

  // The deepest directory on the way that exists decides where the write lands; the rest is created under it.
  const missing: string[] = [];
  let dir = dirname(path);
  let realDir: string;
  while (true) {
    try {
      realDir = await realpath(dir);
      break;
    } catch (err) {
      if (!isNotFound(err) || !within(root, dirname(dir))) throw err;
      missing.unshift(basename(dir));
      dir = dirname(dir);
    }
  }
  if (!within(realRoot, realDir)) throw outsideThroughLink(String(requested));
  const targetDir = join(realDir, ...missing);
  if (missing.length > 0) await mkdir(targetDir, { recursive: true });

  let target = join(targetDir, basename(path));
  try {
    const stat = await lstat(target);
    if (stat.isSymbolicLink()) {
      let real: string;
      try {
        real = await realpath(target);
      } catch {
        throw outsideThroughLink(String(requested));
      }
      if (!within(realRoot, real)) throw outsideThroughLink(String(requested));
      target = real;
    } else if (stat.isDirectory()) {
      throw new Error(`"${String(requested)}" is a directory`);
    }
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  const file = await open(target, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, 0o644);
  try {
    await file.writeFile(content, 'utf8');
  } finally {
    await file.close();
  }
  return `wrote ${Buffer.byteLength(content)} bytes to ${relative(realRoot, target)}`;
}

export function readFileTool(root: string): AgentTool {
  return {
    name: 'read_file',
    description: "Read a text file, by a path relative to the run's working directory.",
    parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'], additionalProperties: false },
    run: async (args) => readConfinedFile(root, (args as { path?: unknown } | null)?.path),
  };
}

export function writeFileTool(root: string): AgentTool {
  return {
    name: 'write_file',
    description: "Write a text file (created or replaced, parent directories created), by a path relative to the run's working directory.",
    parameters: {
      type: 'object',
      properties: { path: { type: 'string' }, content: { type: 'string' } },
      required: ['path', 'content'],
      additionalProperties: false,
    },
    run: async (args) => {
      const { path, content } = (args ?? {}) as { path?: unknown; content?: unknown };
      return writeConfinedFile(root, path, content);
    },
  };
}
