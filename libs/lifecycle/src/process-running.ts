import { readFileSync } from 'node:fs';

/**
 * Whether process `pid` runs. A zombie (it exited and its parent, often init after a re-parenting, has not reaped
 * it yet) does not, where /proc can tell; elsewhere a signal 0 decides (EPERM: it runs, as another user).
 */
export function isProcessRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return true;
  }
}
