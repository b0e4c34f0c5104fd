import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

const KEY_SHAPE = /^[A-Za-z0-9_-]{16,}$/;

/**
 * The dev API key kept in `file` (mode 0600), created on first use and reused on every later run so that a
 * `KEY=...` exported in another terminal keeps working across restarts.
 */
export function loadOrCreateDevApiKey(file: string): { key: string; created: boolean } {
  const existing = readKey(file);
  if (existing !== undefined) return { key: existing, created: false };
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  const key = `cadre_dev_${randomBytes(24).toString('base64url')}`;
  writeFileSync(file, `${key}\n`, { mode: 0o600 });
  // writeFileSync's mode applies only when it creates the file (and passes through the umask).
  chmodSync(file, 0o600);
  return { key, created: true };
}

function readKey(file: string): string | undefined {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  const key = text.trim();
  // A damaged file is replaced rather than trusted.
  return KEY_SHAPE.test(key) ? key : undefined;
}
