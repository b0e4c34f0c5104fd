import type http from 'node:http';
import { context, createContextKey, propagation, trace, SpanKind, SpanStatusCode, type Attributes, type Context, type Link, type Span, type SpanContext } from '@opentelemetry/api';
import type { Telemetry } from 'bullmq';
import { BullMQOtel } from 'bullmq-otel';

export type Env = Record<string, string | undefined>;

export interface Tracing {
  /** Whether spans are recorded and exported (the standard OTEL_* variables asked for it). */
  readonly enabled: boolean;
  /** Flushes spans still buffered; call last on shutdown. */
  shutdown(): Promise<void>;
}

let started: Tracing | undefined;

/**
 * Export is asked for by the standard variables: an OTLP endpoint, or an explicit OTEL_TRACES_EXPORTER other than
 * `none`. Without them nothing is loaded and every span below is the API's no-op (no cost by default).
 */
export function tracingRequested(env: Env): boolean {
  if (env.OTEL_SDK_DISABLED === 'true') return false;
  const exporter = env.OTEL_TRACES_EXPORTER?.trim();
  if (exporter) return exporter !== 'none';
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

/**
 * Starts @opentelemetry/sdk-node for traces only (metrics are Prometheus on /metrics; no logs exporter), configured
 * by the OTEL_* variables the SDK itself reads (protocol, headers, sampler, batch delays). Call once, first thing
 * in an app's main.ts. No instrumentation is patched in: Cadre's spans are its own (HTTP/gRPC edges, BullMQ's
 * telemetry hook, model and tool calls), so module load order does not matter and nothing else pays for it.
 */
export async function startTracing(opts: { serviceName: string; env: Env }): Promise<Tracing> {
  if (started) return started;
  if (!tracingRequested(opts.env)) {
    started = { enabled: false, shutdown: async () => undefined };
    return started;
  }
  const { NodeSDK } = await import('@opentelemetry/sdk-node');
  const sdk = new NodeSDK({
    serviceName: opts.env.OTEL_SERVICE_NAME ?? opts.serviceName,
    metricReaders: [],
    logRecordProcessors: [],
  });
  sdk.start();
  started = { enabled: true, shutdown: () => sdk.shutdown().catch(() => undefined) };
  return started;
}

export function tracingEnabled(): boolean {
  return started?.enabled ?? false;
}

/**
 * BullMQ's own telemetry hook (bullmq-otel) when tracing is on: a producer span per enqueue whose context is kept
 * in the job's options, and a consumer span per processing attempt that continues it, so a retried or handed-back
 * attempt joins the same trace. Undefined (BullMQ skips all of it) when tracing is off.
 */
export function bullmqTelemetry(): Telemetry | undefined {
  if (!tracingEnabled()) return undefined;
  return new BullMQOtel({ tracerName: 'cadre-bullmq' }) as unknown as Telemetry;
}

export const tracer = trace.getTracer('cadre');

/** Set by inOwnTrace: the long-lived span the next span links to instead of hanging below it. */
const OWN_TRACE_LINK = createContextKey('cadre.own-trace-link');

/**
 * Runs `fn` so that the span it starts (inSpan) begins a trace of its own, linked to the span in progress instead
 * of under it: for work a long-lived call starts (each turn of a roz StreamSession), so every piece is one trace
 * and a connection open for hours does not make one trace hours long.
 */
export function inOwnTrace<T>(fn: () => T): T {
  const current = trace.getActiveSpan()?.spanContext();
  if (!current) return fn();
  return context.with(trace.deleteSpan(context.active()).setValue(OWN_TRACE_LINK, current), fn);
}

/** Runs `fn` in a new span that ends when `fn` settles; an error marks the span and is rethrown. */
export async function inSpan<T>(name: string, opts: { kind?: SpanKind; attributes?: Attributes; parent?: Context; links?: Link[] }, fn: (span: Span) => Promise<T>): Promise<T> {
  let parent = opts.parent ?? context.active();
  const links = [...(opts.links ?? [])];
  const ownTraceOf = opts.parent ? undefined : (parent.getValue(OWN_TRACE_LINK) as SpanContext | undefined);
  if (ownTraceOf) {
    // The root of a new trace (inOwnTrace took the active span out); what runs below it is an ordinary child.
    parent = parent.deleteValue(OWN_TRACE_LINK);
    links.push({ context: ownTraceOf });
  }
  return tracer.startActiveSpan(name, { kind: opts.kind ?? SpanKind.INTERNAL, attributes: opts.attributes ?? {}, links }, parent, async (span) => {
    try {
      return await fn(span);
    } catch (err) {
      span.recordException(err as Error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
      throw err;
    } finally {
      span.end();
    }
  });
}

/** Adds attributes to the span of the work in progress (e.g. task_id once it is known). */
export function annotateSpan(attributes: Attributes): void {
  trace.getActiveSpan()?.setAttributes(attributes);
}

/** W3C trace context of the current span as headers (`traceparent`, `tracestate`) for an outgoing request. */
export function traceHeaders(): Record<string, string> {
  const headers: Record<string, string> = {};
  propagation.inject(context.active(), headers);
  return headers;
}

/**
 * The trace of the work in progress, saved (W3C headers as JSON) with state another process picks up later, e.g. a
 * parked session turn; '' when nothing is traced.
 */
export function savedTrace(): string {
  const headers = traceHeaders();
  return headers.traceparent ? JSON.stringify(headers) : '';
}

/**
 * Runs `fn` in a span that continues a trace saved earlier (`savedTrace`), so what resumes parked work joins the
 * trace of the work it resumes; the span in progress (the request that resumed it) is linked, not the parent.
 * Without a saved trace the span is a child of the work in progress.
 */
export async function inSavedTrace<T>(saved: string | null, name: string, opts: { attributes?: Attributes }, fn: (span: Span) => Promise<T>): Promise<T> {
  if (!saved) return inSpan(name, opts, fn);
  const current = trace.getActiveSpan()?.spanContext();
  return inSpan(name, { ...opts, parent: contextFromCarrier(JSON.parse(saved) as Record<string, string>), ...(current && { links: [{ context: current }] }) }, fn);
}

/** The context a caller sent (W3C `traceparent` in HTTP headers or gRPC metadata). */
export function contextFromCarrier(carrier: Record<string, unknown>): Context {
  return propagation.extract(context.active(), carrier, {
    keys: (c) => Object.keys(c),
    get: (c, key) => {
      const v = c[key];
      if (Array.isArray(v)) return v.map(String);
      return v === undefined ? undefined : Buffer.isBuffer(v) ? v.toString() : String(v);
    },
  });
}

/** Trace and span ids of the active span, for log lines (pino mixin); empty when nothing is traced. */
export function activeTraceIds(): { trace_id?: string; span_id?: string } {
  const span = trace.getActiveSpan();
  if (!span) return {};
  const { traceId, spanId, traceFlags } = span.spanContext();
  // An unsampled span's ids lead nowhere in a tracing backend.
  if ((traceFlags & 1) === 0) return {};
  return { trace_id: traceId, span_id: spanId };
}

/**
 * Wraps an HTTP server's request handler in a SERVER span that continues the caller's trace; everything the
 * handler does (asynchronously too) runs inside it. The route is named later by the framework (`nameHttpSpan`).
 * Returns the handler unchanged when tracing is off.
 */
export function traceHttpRequests<H extends (req: http.IncomingMessage, res: http.ServerResponse) => void>(handler: H): H {
  if (!tracingEnabled()) return handler;
  return ((req: http.IncomingMessage, res: http.ServerResponse) => {
    const parent = contextFromCarrier(req.headers);
    const span = tracer.startSpan(req.method ?? 'HTTP', {
      kind: SpanKind.SERVER,
      attributes: { 'http.request.method': req.method ?? '', 'url.path': (req.url ?? '').split('?')[0] ?? '' },
    }, parent);
    res.once('close', () => {
      span.setAttribute('http.response.status_code', res.statusCode);
      if (res.statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
    });
    context.with(trace.setSpan(parent, span), () => handler(req, res));
  }) as H;
}

/** Names the active HTTP span after its route template (`POST /api/tasks`), as the semantic conventions ask. */
export function nameHttpSpan(method: string, route: string, attributes: Attributes = {}): void {
  const span = trace.getActiveSpan();
  if (!span) return;
  span.updateName(`${method} ${route}`);
  span.setAttributes({ 'http.route': route, ...attributes });
}

export { SpanKind, SpanStatusCode, type Span, type Attributes, type Context };
