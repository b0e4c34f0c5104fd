// Types of answer.js for its TypeScript readers (the gateway's edges, the `cadre` CLI).

/** A turn's answer so far; `call` marks where the model call still streaming began (null once it is committed). */
export interface Answer {
  text: string;
  thinking: string;
  call: { text: number; thinking: number } | null;
}

export interface SessionEventLike {
  event_type: string;
  payload?: Record<string, unknown> | object;
}

export function emptyAnswer(): Answer;
/** Folds one session event into the answer (in place) and returns it. */
export function applyAnswerEvent(answer: Answer, e: SessionEventLike): Answer;
