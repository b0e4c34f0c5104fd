import * as grpc from '@grpc/grpc-js';
import { context, trace, type Context } from '@opentelemetry/api';
import { Counter, Histogram, type Registry } from 'prom-client';
import { SpanKind, SpanStatusCode, contextFromCarrier, tracer, tracingEnabled, type Span } from '@cadre/observability';

/** Call buckets (seconds): unary calls are milliseconds, a WatchTeam stream lasts as long as its task. */
const BUCKETS = [0.005, 0.025, 0.1, 0.5, 1, 5, 30, 120, 600];

/**
 * A server interceptor for every gRPC method: calls started and handled (by method and status code) and their
 * duration, and a SERVER span that continues the caller's trace (W3C `traceparent` metadata), active while the
 * handler runs. The method label is the registered method path, a bounded set.
 */
export function grpcTelemetry(metrics: Registry): grpc.ServerInterceptor {
  const startedTotal = new Counter({ name: 'cadre_grpc_server_started_total', help: 'gRPC calls started, by method', labelNames: ['grpc_method'], registers: [metrics] });
  const handled = new Counter({ name: 'cadre_grpc_server_handled_total', help: 'gRPC calls finished, by method and status code', labelNames: ['grpc_method', 'grpc_code'], registers: [metrics] });
  const seconds = new Histogram({ name: 'cadre_grpc_server_handling_seconds', help: 'gRPC call duration by method (a stream counts until it ends)', labelNames: ['grpc_method'], buckets: BUCKETS, registers: [metrics] });
  const traced = tracingEnabled();

  return (method, call) => {
    const grpcMethod = method.path.replace(/^\//, '');
    const t0 = performance.now();
    startedTotal.inc({ grpc_method: grpcMethod });
    let span: Span | undefined;
    let ctx: Context = context.active();
    const inCall = <T>(fn: () => T): T => (span ? context.with(ctx, fn) : fn());
    let finished = false;
    // Once per call: a status sent, or the client's cancel (which sends none).
    const finish = (code: grpc.status, details?: string): void => {
      if (finished) return;
      finished = true;
      handled.inc({ grpc_method: grpcMethod, grpc_code: grpc.status[code] ?? String(code) });
      seconds.observe({ grpc_method: grpcMethod }, (performance.now() - t0) / 1000);
      if (span) {
        span.setAttribute('rpc.grpc.status_code', code);
        if (code !== grpc.status.OK) span.setStatus({ code: SpanStatusCode.ERROR, ...(details !== undefined && { message: details }) });
        span.end();
      }
    };
    return new grpc.ServerInterceptingCall(call, new grpc.ResponderBuilder()
      .withStart((next) => {
        next(new grpc.ServerListenerBuilder()
          .withOnReceiveMetadata((metadata, nextMetadata) => {
            if (traced) {
              const parent = contextFromCarrier(metadata.getMap());
              span = tracer.startSpan(grpcMethod, { kind: SpanKind.SERVER, attributes: { 'rpc.system': 'grpc', 'rpc.method': grpcMethod } }, parent);
              ctx = trace.setSpan(parent, span);
            }
            inCall(() => nextMetadata(metadata));
          })
          .withOnReceiveMessage((message, nextMessage) => inCall(() => nextMessage(message)))
          .withOnReceiveHalfClose((nextHalfClose) => inCall(() => nextHalfClose()))
          .withOnCancel(() => finish(grpc.status.CANCELLED, 'cancelled by the client'))
          .build());
      })
      .withSendStatus((status, nextStatus) => {
        finish(status.code, status.details);
        nextStatus(status);
      })
      .build());
  };
}
