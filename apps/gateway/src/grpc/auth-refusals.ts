import * as grpc from '@grpc/grpc-js';
import type { AuthRefusalLog } from '../auth-refusals.ts';

/** Every gRPC call answered UNAUTHENTICATED or PERMISSION_DENIED, on any service, goes to the refusal log. */
export function grpcAuthRefusals(refusals: AuthRefusalLog): grpc.ServerInterceptor {
  return (method, call) => {
    let metadata: grpc.Metadata | undefined;
    return new grpc.ServerInterceptingCall(call, new grpc.ResponderBuilder()
      .withStart((next) => {
        next(new grpc.ServerListenerBuilder()
          .withOnReceiveMetadata((received, nextMetadata) => {
            metadata = received;
            nextMetadata(received);
          })
          .build());
      })
      .withSendStatus((status, nextStatus) => {
        if (status.code === grpc.status.UNAUTHENTICATED || status.code === grpc.status.PERMISSION_DENIED) {
          refusals.record({
            edge: 'grpc', route: method.path.replace(/^\//, ''), status: grpc.status[status.code], forbidden: status.code === grpc.status.PERMISSION_DENIED,
            client: call.getPeer(), credentials: (key) => metadata?.get(key).filter((v): v is string => typeof v === 'string'),
          });
        }
        nextStatus(status);
      })
      .build());
  };
}
