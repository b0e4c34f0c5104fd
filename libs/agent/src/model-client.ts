import OpenAI from 'openai';

export interface ModelClientOptions {
  baseURL: string;
  apiKey: string;
  /** Retries of 408/409/429/5xx and connection errors, with exponential backoff (openai's own). Default 3. */
  maxRetries?: number;
  /** Per-request limit until response headers arrive. Default: openai's (10 minutes). */
  timeoutMs?: number;
}

/** An OpenAI-compatible client (OpenAI, vLLM, Ollama, the scripted model). Reads nothing from the environment. */
export function createModelClient(opts: ModelClientOptions): OpenAI {
  return new OpenAI({
    baseURL: opts.baseURL,
    apiKey: opts.apiKey,
    maxRetries: opts.maxRetries ?? 3,
    ...(opts.timeoutMs !== undefined && { timeout: opts.timeoutMs }),
    // Explicit nulls stop the client falling back to OPENAI_* variables: config is parsed once and passed in.
    adminAPIKey: null,
    organization: null,
    project: null,
    webhookSecret: null,
    logLevel: 'warn',
  });
}
