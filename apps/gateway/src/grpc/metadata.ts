import type * as grpc from '@grpc/grpc-js';

/** A call's metadata value as a string (the first of its values), or undefined when absent or binary. */
export function metadataValue(metadata: grpc.Metadata, key: string): string | undefined {
  const value = metadata.get(key)[0];
  return typeof value === 'string' ? value : undefined;
}
