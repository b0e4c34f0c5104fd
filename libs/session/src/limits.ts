/** Bounds on what a client may send; bigger input is refused before anything is written. */
export const SESSION_LIMITS = {
  content: 100_000,
  messageId: 128,
  systemContext: 20_000,
  projectContextBlocks: 32,
  projectContextBlock: 100_000,
  history: 500,
  historyContent: 100_000,
  /** Client tools in a session (all sources) or in one message's snapshot. */
  tools: 64,
  toolDescription: 4_096,
  toolSchemaBytes: 32_768,
  toolTimeoutMs: 3_600_000,
  source: 64,
  toolResult: 1_000_000,
  reason: 500,
  model: 200,
  maxContextTokens: 10_000_000,
  /** Images in one user message, and the bytes of each (decoded): they stay in the transcript, in Redis. */
  images: 4,
  imageBytes: 2 * 1024 * 1024,
  /** Steering (or follow-up) messages waiting in one session. */
  queuedInputs: 100,
} as const;
