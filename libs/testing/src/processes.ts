import { readFileSync } from 'node:fs';

/**
 * Whether a process is running: it exists and is not a zombie (a killed child may linger unreaped for a moment,
 * and `kill(pid, 0)` still succeeds on it).
 */
export function isProcessAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}
