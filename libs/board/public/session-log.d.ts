// Types of session-log.js for its TypeScript readers.
import type { SessionEventLike } from './answer.js';

/** Who a session event comes from, as the board's log column shows it: user, agent, tool, approval or session. */
export function sessionEventSource(e: SessionEventLike): string;
/** What a session event says, in a few words (the board's log line). */
export function describeSessionEvent(e: SessionEventLike): string;
