import http from 'node:http';

/** One span as OTLP/JSON carries it, flattened with its service's name. */
export interface ReceivedSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  /** The spans this one links to (not its parent): `<traceId>/<spanId>`. */
  links: string[];
}

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
  arrayValue?: { values?: OtlpValue[] };
}
interface OtlpAttribute { key: string; value: OtlpValue }
interface OtlpSpan { traceId: string; spanId: string; parentSpanId?: string; name: string; kind: number; attributes?: OtlpAttribute[]; links?: { traceId: string; spanId: string }[] }
interface OtlpExport {
  resourceSpans?: { resource?: { attributes?: OtlpAttribute[] }; scopeSpans?: { spans?: OtlpSpan[] }[] }[];
}

/**
 * A real OTLP/HTTP trace receiver for tests: accepts `POST /v1/traces` in the JSON encoding (the exporters'
 * `http/json` protocol) and keeps every span. Ids are hex in OTLP/JSON; base64 (protobuf-JSON style) is
 * converted too.
 */
export class OtlpReceiver {
  readonly spans: ReceivedSpan[] = [];
  private server!: http.Server;
  port = 0;

  static async start(): Promise<OtlpReceiver> {
    const receiver = new OtlpReceiver();
    receiver.server = http.createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => (body += c));
      req.on('end', () => {
        if (req.method !== 'POST' || req.url !== '/v1/traces') return void res.writeHead(404).end();
        try {
          receiver.accept(JSON.parse(body) as OtlpExport);
          res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
        } catch {
          res.writeHead(400).end();
        }
      });
    });
    await new Promise<void>((resolve) => receiver.server.listen(0, '127.0.0.1', resolve));
    receiver.port = (receiver.server.address() as { port: number }).port;
    return receiver;
  }

  get endpoint(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  private accept(body: OtlpExport): void {
    for (const rs of body.resourceSpans ?? []) {
      const resource = attributesOf(rs.resource?.attributes);
      for (const ss of rs.scopeSpans ?? []) {
        for (const span of ss.spans ?? []) {
          this.spans.push({
            service: String(resource['service.name'] ?? ''),
            traceId: hexId(span.traceId),
            spanId: hexId(span.spanId),
            parentSpanId: span.parentSpanId ? hexId(span.parentSpanId) : '',
            name: span.name,
            kind: span.kind,
            attributes: attributesOf(span.attributes),
            links: (span.links ?? []).map((l) => `${hexId(l.traceId)}/${hexId(l.spanId)}`),
          });
        }
      }
    }
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

function hexId(id: string): string {
  return /^[0-9a-f]+$/i.test(id) && (id.length === 32 || id.length === 16) ? id.toLowerCase() : Buffer.from(id, 'base64').toString('hex');
}

function valueOf(v: OtlpValue): unknown {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.arrayValue) return (v.arrayValue.values ?? []).map(valueOf);
  return undefined;
}

function attributesOf(attrs: OtlpAttribute[] | undefined): Record<string, unknown> {
  return Object.fromEntries((attrs ?? []).map((a) => [a.key, valueOf(a.value)]));
}
