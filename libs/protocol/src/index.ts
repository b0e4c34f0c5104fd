import { fileURLToPath } from 'node:url';

// Public surface of @cadre/protocol: the team event model, the generated roz.v1 gRPC types, and the
// mapping between them.
export * from './team-events.ts';
export * from './session-events.ts';
export * from './run-types.ts';
export { canonicalUuid, isUuid } from './ids.ts';
export { encodeProtoTeamEvent, rozPhaseNumber, toProtoTeamEvent } from './to-proto.ts';

/** buf's compiled FileDescriptorSet of proto/ (npm run proto:gen), which gRPC reflection serves. */
export const DESCRIPTOR_SET_PATH = fileURLToPath(new URL('../descriptors/roz.binpb', import.meta.url));
/** buf's compiled FileDescriptorSet of grpc.health.v1 (grpc-health-check's health.proto), also served by reflection. */
export const HEALTH_DESCRIPTOR_SET_PATH = fileURLToPath(new URL('../descriptors/grpc-health.binpb', import.meta.url));

// Generated from proto/roz/v1/agent.proto (npm run proto:gen). TeamEvent and TokenUsage take a Proto
// suffix because team-events.ts already names the HTTP/SSE shapes that way.
export {
  AgentServiceClient,
  AgentServiceService,
  TaskStatusChanged,
  TeamEvent as TeamEventProto,
  TokenUsage as TokenUsageProto,
  WatchTeamRequest,
  WorkerApprovalRequested,
  WorkerApprovalResolved,
  WorkerCompleted,
  WorkerExited,
  WorkerFailed,
  WorkerPhase,
  WorkerStarted,
  WorkerToolCall,
} from './gen/roz/v1/agent.ts';
export type { AgentServiceServer } from './gen/roz/v1/agent.ts';
// StreamSession's messages (roz's names).
export {
  SessionRequest,
  SessionResponse,
  StartSession,
  UserMessage as SessionUserMessage,
  ToolResult as SessionToolResult,
  ToolSchema,
  ToolCategoryHint,
  ConversationMessage,
  RegisterTools,
  ApprovalRule as SessionApprovalRule,
} from './gen/roz/v1/agent.ts';
export type { DeepPartial } from './gen/roz/v1/agent.ts';
// Generated from proto/kontekst/kontekst.proto: kontekst's own AgentService (Run) and DaemonService, as one
// namespace, since its names (AgentService, RunEvent) would clash with roz's.
export * as kontekst from './gen/kontekst/kontekst.ts';
