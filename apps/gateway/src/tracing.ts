// Imported first by main.ts, so OpenTelemetry is up before anything else runs. Inert unless the standard OTEL_*
// variables ask for export (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_EXPORTER, ...); the SDK reads those itself.
import { startTracing } from '@cadre/observability';

export const tracing = await startTracing({ serviceName: 'cadre-gateway', env: process.env });
