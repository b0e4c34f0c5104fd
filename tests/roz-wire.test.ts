// Cadre's roz.v1 schema must stay a wire-compatible superset of roz-oss's: every field roz declares on a message
// both declare keeps its number, name and wire type, so prost (roz's codec), protobufjs and buf decode our bytes.
// roz's proto is compiled by the same buf as ours, so both sides are real FileDescriptorProtos.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { fromBinary } from '@bufbuild/protobuf';
import {
  FieldDescriptorProto_Label as Label,
  FieldDescriptorProto_Type as T,
  FileDescriptorSetSchema,
  type DescriptorProto,
  type FieldDescriptorProto,
  type FileDescriptorSet,
  type ServiceDescriptorProto,
} from '@bufbuild/protobuf/wkt';
import { describe, expect, it } from 'vitest';

const REPO = fileURLToPath(new URL('../', import.meta.url));
const ROZ_PROTO_DIR = 'tests/fixtures/roz-oss/proto';
/** roz's first published schema: the StreamSession responses the reference documents (see its README). */
const ROZ_FIRST_PROTO_DIR = 'tests/fixtures/roz-oss-first/proto';

function rozDescriptors(dir = ROZ_PROTO_DIR): FileDescriptorSet {
  const bytes = execFileSync(`${REPO}node_modules/.bin/buf`, ['build', dir, '--as-file-descriptor-set', '-o', '-'], { cwd: REPO });
  return fromBinary(FileDescriptorSetSchema, bytes);
}
/** What the gateway serves through reflection (npm run proto:check keeps it equal to proto/). */
const ourDescriptors = (): FileDescriptorSet => fromBinary(FileDescriptorSetSchema, readFileSync(`${REPO}libs/protocol/descriptors/roz.binpb`));

/** Every message of package roz.v1, nested ones included, by full name ('.roz.v1.TeamEvent'). */
function messagesOf(set: FileDescriptorSet): Map<string, DescriptorProto> {
  const out = new Map<string, DescriptorProto>();
  const visit = (prefix: string, m: DescriptorProto): void => {
    const name = `${prefix}.${m.name}`;
    out.set(name, m);
    for (const nested of m.nestedType) visit(name, nested);
  };
  for (const file of set.file.filter((f) => f.package === 'roz.v1')) for (const m of file.messageType) visit('.roz.v1', m);
  return out;
}

function servicesOf(set: FileDescriptorSet): Map<string, ServiceDescriptorProto> {
  return new Map(set.file.filter((f) => f.package === 'roz.v1').flatMap((f) => f.service.map((s) => [s.name, s] as const)));
}

const WIRE: Record<number, string> = {
  [T.INT32]: 'varint', [T.INT64]: 'varint', [T.UINT32]: 'varint', [T.UINT64]: 'varint', [T.BOOL]: 'varint', [T.ENUM]: 'varint',
  [T.SINT32]: 'varint', [T.SINT64]: 'varint',
  [T.FIXED32]: 'i32', [T.SFIXED32]: 'i32', [T.FLOAT]: 'i32',
  [T.FIXED64]: 'i64', [T.SFIXED64]: 'i64', [T.DOUBLE]: 'i64',
  [T.STRING]: 'len', [T.BYTES]: 'len', [T.MESSAGE]: 'len', [T.GROUP]: 'group',
};

/**
 * Types that read each other's bytes as the same value (protobuf's "updating a message type" rules): the plain
 * varint integers and bool; the zigzag ones; string and bytes; a message only as the same message.
 */
function valueClass(f: FieldDescriptorProto): string {
  switch (f.type) {
    case T.INT32: case T.INT64: case T.UINT32: case T.UINT64: case T.BOOL: case T.ENUM: return 'varint-integer';
    case T.SINT32: case T.SINT64: return 'zigzag-integer';
    case T.FIXED32: case T.SFIXED32: return 'fixed32-integer';
    case T.FIXED64: case T.SFIXED64: return 'fixed64-integer';
    case T.STRING: case T.BYTES: return 'bytes';
    case T.MESSAGE: case T.GROUP: return `message ${f.typeName}`;
    default: return `${T[f.type]}`;
  }
}

/** A field as the wire sees it: repeated scalars are packed in proto3, so repeatedness is part of the wire shape. */
const wireShape = (f: FieldDescriptorProto) => ({
  wire: f.label === Label.REPEATED ? `repeated ${WIRE[f.type]}` : WIRE[f.type],
  value: valueClass(f),
});

const inReserved = (m: DescriptorProto, n: number): boolean => m.reservedRange.some((r) => n >= r.start && n < r.end);

describe("Cadre's roz.v1 against roz-oss's proto/roz/v1/agent.proto", () => {
  const roz = rozDescriptors();
  const ours = ourDescriptors();
  const rozMessages = messagesOf(roz);
  const ourMessages = messagesOf(ours);
  // roz later replaced SessionResponse's typed responses (SessionStarted = 1 ... ActivityUpdate = 11, the ones the
  // reference documents) with an event envelope; Cadre serves the documented ones, checked against roz's first
  // schema below.
  const redesigned = new Set(['.roz.v1.SessionResponse']);
  const shared = [...rozMessages.keys()].filter((name) => ourMessages.has(name) && !redesigned.has(name)).sort();

  it('shares the WatchTeam and StreamSession request messages (so the comparison below is not vacuous)', () => {
    expect(shared).toEqual(
      [
        'BinaryContent',
        'CameraRequest',
        'CancelSession',
        'CancelTurn',
        'ContentBlock',
        'ContentPart',
        'ContextCompacted',
        'ConversationMessage',
        'IceCandidate',
        'ImageContent',
        'Keepalive',
        'MessageFeedback',
        'PermissionDecision',
        'Ping',
        'Pong',
        'RegisterTools',
        'SessionRequest',
        'StartSession',
        'TeamEvent',
        'TextContent',
        'ThinkingContent',
        'ToolResult',
        'ToolResultContent',
        'ToolSchema',
        'ToolUseContent',
        'UserMessage',
        'WatchTeamRequest',
        'WebRtcAnswer',
        'WorkerApprovalRequested',
        'WorkerApprovalResolved',
        'WorkerCompleted',
        'WorkerExited',
        'WorkerFailed',
        'WorkerPhase',
        'WorkerStarted',
        'WorkerToolCall',
      ].map((m) => `.roz.v1.${m}`),
    );
  });

  it.each(shared)('%s: every roz field is ours with the same number, name and wire type', (name) => {
    const rozMessage = rozMessages.get(name)!;
    const ourMessage = ourMessages.get(name)!;
    for (const rozField of rozMessage.field) {
      const ourField = ourMessage.field.find((f) => f.number === rozField.number);
      expect(ourField, `${name} field ${rozField.number} (${rozField.name}) is missing`).toBeDefined();
      expect(ourField!.name, `${name} field ${rozField.number}`).toBe(rozField.name);
      expect(wireShape(ourField!), `${name}.${rozField.name} = ${rozField.number}`).toEqual(wireShape(rozField));
    }
  });

  it.each(shared)('%s: our additions take numbers roz neither uses nor reserves', (name) => {
    const rozMessage = rozMessages.get(name)!;
    const ourMessage = ourMessages.get(name)!;
    const rozNumbers = new Set(rozMessage.field.map((f) => f.number));
    const added = ourMessage.field.filter((f) => !rozNumbers.has(f.number));
    for (const field of added) {
      expect(inReserved(rozMessage, field.number), `${name}.${field.name} = ${field.number} is reserved by roz`).toBe(false);
      expect(rozMessage.reservedName, `${name}.${field.name} is a name roz reserves`).not.toContain(field.name);
    }
    for (const rozField of rozMessage.field) expect(inReserved(ourMessage, rozField.number), `${name} reserves roz's ${rozField.name}`).toBe(false);
  });

  it("WorkerPhase.phase is roz's uint32, and Cadre's phase name sits in a field of its own", () => {
    const phase = ourMessages.get('.roz.v1.WorkerPhase')!.field;
    expect(phase.find((f) => f.name === 'phase')).toMatchObject({ number: 2, type: T.UINT32 });
    expect(phase.find((f) => f.name === 'phase_name')).toMatchObject({ number: 5, type: T.STRING });
  });

  it('serves WatchTeam with the same request, response and streaming as roz', () => {
    const rozMethod = servicesOf(roz).get('AgentService')!.method.find((m) => m.name === 'WatchTeam')!;
    const ourMethod = servicesOf(ours).get('AgentService')!.method.find((m) => m.name === 'WatchTeam')!;
    const shape = (m: typeof rozMethod) => ({ input: m.inputType, output: m.outputType, clientStreaming: m.clientStreaming, serverStreaming: m.serverStreaming });
    expect(shape(ourMethod)).toEqual(shape(rozMethod));
    expect(shape(ourMethod)).toEqual({ input: '.roz.v1.WatchTeamRequest', output: '.roz.v1.TeamEvent', clientStreaming: false, serverStreaming: true });
  });
});

describe("Cadre's StreamSession against roz-oss's first published schema (the reference's messages)", () => {
  const first = messagesOf(rozDescriptors(ROZ_FIRST_PROTO_DIR));
  const ours = messagesOf(ourDescriptors());
  // TokenUsage: the name is TeamEvent's here, so roz's session TokenUsage is SessionTokenUsage (same fields and
  // numbers, checked below). PermissionDecision: roz renamed field 1 tool_call_id → approval_id; Cadre has the
  // current name (same number and wire type).
  const sessionMessages = [
    'SessionRequest', 'StartSession', 'UserMessage', 'ToolResult', 'CancelTurn', 'CancelSession', 'Ping', 'RegisterTools', 'ToolSchema',
    'ConversationMessage', 'ContentPart', 'ContentBlock', 'BinaryContent', 'MessageFeedback',
    'SessionResponse', 'SessionStarted', 'PermissionRule', 'TextDelta', 'ThinkingDelta', 'ToolRequest', 'TurnComplete', 'SessionError',
    'Keepalive', 'Pong', 'ContextCompacted', 'PresenceHint', 'ActivityUpdate',
  ].map((m) => `.roz.v1.${m}`);

  it.each(sessionMessages)('%s: every field of roz\'s first schema is ours with the same number, name and wire type', (name) => {
    const rozMessage = first.get(name)!;
    const ourMessage = ours.get(name);
    expect(ourMessage, `${name} is missing`).toBeDefined();
    for (const rozField of rozMessage.field) {
      const ourField = ourMessage!.field.find((f) => f.number === rozField.number);
      expect(ourField, `${name} field ${rozField.number} (${rozField.name}) is missing`).toBeDefined();
      expect(ourField!.name, `${name} field ${rozField.number}`).toBe(rozField.name);
      expect(wireShape(ourField!).wire, `${name}.${rozField.name} = ${rozField.number}`).toEqual(wireShape(rozField).wire);
    }
  });

  it("TurnComplete.usage is roz's TokenUsage on the wire", () => {
    const rozUsage = first.get('.roz.v1.TokenUsage')!.field.map((f) => [f.number, f.name, f.type]);
    expect(ours.get('.roz.v1.SessionTokenUsage')!.field.map((f) => [f.number, f.name, f.type])).toEqual(rozUsage);
  });

  it('serves StreamSession as a bidi stream of SessionRequest → SessionResponse', () => {
    const method = servicesOf(ourDescriptors()).get('AgentService')!.method.find((m) => m.name === 'StreamSession')!;
    expect({ input: method.inputType, output: method.outputType, c: method.clientStreaming, s: method.serverStreaming })
      .toEqual({ input: '.roz.v1.SessionRequest', output: '.roz.v1.SessionResponse', c: true, s: true });
  });
});
