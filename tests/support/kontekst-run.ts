import * as grpc from '@grpc/grpc-js';
import { kontekst } from '@cadre/protocol';
import { TEST_API_KEY } from '@cadre/testing';

export type RunEventCase = NonNullable<kontekst.RunEvent['event']>;

/** One kontekst AgentService/Run call (a real grpc-js client): records every event, lets a test wait for one and send commands. */
export class KontekstRun {
  readonly events: RunEventCase[] = [];
  readonly status: Promise<grpc.StatusObject>;
  private readonly call: grpc.ClientDuplexStream<kontekst.RunCommand, kontekst.RunEvent>;
  private readonly client: grpc.Client;
  private wake: (() => void) | undefined;

  /** `target`: host:port of a gateway (or any server with the service). */
  constructor(target: string) {
    this.client = new kontekst.AgentServiceClient(target, grpc.credentials.createInsecure());
    const metadata = new grpc.Metadata();
    metadata.set('authorization', `Bearer ${TEST_API_KEY}`);
    this.call = (this.client as unknown as kontekst.AgentServiceClient).run(metadata);
    this.call.on('data', (e: kontekst.RunEvent) => {
      if (e.event) this.events.push(e.event);
      this.wake?.();
    });
    this.status = new Promise((resolve) => {
      this.call.on('error', (err: grpc.ServiceError) => resolve(err));
      this.call.on('status', (s: grpc.StatusObject) => {
        if (s.code === grpc.status.OK) resolve(s);
      });
    });
    void this.status.then(() => this.wake?.());
  }

  send(command: kontekst.RunCommand['command']): void {
    this.call.write({ command });
  }

  end(): void {
    this.call.end();
  }

  close(): void {
    this.client.close();
  }

  cases(): string[] {
    return this.events.map((e) => e.$case);
  }

  of<C extends RunEventCase['$case']>(kind: C): Extract<RunEventCase, { $case: C }>['value'][] {
    return this.events.filter((e) => e.$case === kind).map((e) => e.value) as never;
  }

  async waitFor<C extends RunEventCase['$case']>(kind: C, timeoutMs = 20_000): Promise<Extract<RunEventCase, { $case: C }>['value']> {
    const deadline = Date.now() + timeoutMs;
    let ended = false;
    void this.status.then(() => (ended = true));
    while (true) {
      const hit = this.events.find((e) => e.$case === kind);
      if (hit) return hit.value as never;
      if (ended || Date.now() > deadline) throw new Error(`no ${kind}; events: ${this.cases().join(',')}`);
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        setTimeout(resolve, 200);
      });
    }
  }
}
