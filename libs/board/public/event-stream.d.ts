// Types of event-stream.js for its TypeScript readers (the `cadre` CLI); the browser loads event-stream.js as it is.
import type { TeamEventLike } from './team.js';

export type StreamStateKind = 'live' | 'retrying' | 'ended' | 'stopped';

export interface StreamOptions {
  url: string;
  headers: () => Record<string, string>;
  afterSeq: number;
  onEvent(event: TeamEventLike): void;
  onState?(kind: StreamStateKind, text: string): void;
  isTerminal(type: string): boolean;
}

export interface StreamHandle {
  close(): void;
  done: Promise<{ ended: boolean; error?: Error & { status?: number } }>;
}

export function followStream(opts: StreamOptions): StreamHandle;
