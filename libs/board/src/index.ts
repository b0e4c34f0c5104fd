import { fileURLToPath } from 'node:url';

/**
 * The operator board: static ES modules with no build step, served by the gateway at `/`. It uses only the
 * public HTTP APIs (tasks with the bearer key, runs with the runs key), as a third-party UI would.
 */
export const BOARD_ROOT: string = fileURLToPath(new URL('../public/', import.meta.url));

/**
 * Headers for every board file: the page may talk only to its own origin and load only its own scripts, so an
 * injected string in a goal or an event can neither run nor send the key elsewhere.
 */
export const BOARD_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy': "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-cache',
};

/** The team model the board draws, for other UIs (the `cadre` CLI): one fold of roster and events, tested once. */
export { applyEvent, applyRoster, clip, describe, duration, emptyTeam, isTerminal, shownStatus, STALLED_AFTER_MS, tree } from '../public/team.js';
export type { Agent, Ending, Team, TaskSnapshot, TeamEventLike } from '../public/team.js';
/** Following a task's or session's SSE stream with resume, for the same readers. */
export { followStream } from '../public/event-stream.js';
export type { StreamHandle, StreamOptions, StreamStateKind } from '../public/event-stream.js';
/** A session turn's answer text, folded from its events (deltas, and what a lost attempt streamed dropped). */
export { applyAnswerEvent, emptyAnswer } from '../public/answer.js';
export type { Answer, SessionEventLike } from '../public/answer.js';
/** What a session's event says in the board's log, and who it comes from. */
export { describeSessionEvent, sessionEventSource } from '../public/session-log.js';
