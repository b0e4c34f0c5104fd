import { prettyFactory } from 'pino-pretty';

/**
 * Turns one pino JSON line into a coloured, human line (pino-pretty), for a terminal only: `npm start` uses it on
 * its children's output when its stdout is a TTY. Lines that are not pino JSON pass through unchanged.
 */
export function createLogPrettifier(opts: { colour: boolean }): (line: string) => string {
  const pretty = prettyFactory({ colorize: opts.colour, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname,name', singleLine: true });
  return (line) => {
    if (!line.startsWith('{')) return line;
    try {
      return pretty(line).replace(/\n$/, '');
    } catch {
      return line;
    }
  };
}
