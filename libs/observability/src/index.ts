export { createLogger, logInboxFailure, type Logger } from './logger.ts';
export { createMetricsRegistry, serveMetrics, agentMetrics, approvalMetrics, eventsAppendedMetric, sessionTurnMetrics, sessionTurnEnds, BoundedLabel, type MetricsRegistry, type Readiness } from './metrics.ts';
export {
  startTracing,
  tracingRequested,
  tracingEnabled,
  bullmqTelemetry,
  tracer,
  inSpan,
  inOwnTrace,
  inSavedTrace,
  savedTrace,
  annotateSpan,
  traceHeaders,
  contextFromCarrier,
  activeTraceIds,
  traceHttpRequests,
  nameHttpSpan,
  SpanKind,
  SpanStatusCode,
  type Tracing,
  type Span,
  type Attributes,
  type Context,
} from './tracing.ts';
export { droppedLogLines, LOG_BUFFER_BYTES } from './log-destination.ts';
export { createLogPrettifier } from './pretty.ts';
export { exitOnCrash, scrubError, scrubText, type ScrubbedError } from './scrub.ts';
