import type { RedisTarget } from '@cadre/config';
import { connectRedis, type RedisClient } from '@cadre/store';

/** A gateway's connections to Redis, each under its name in CLIENT LIST. */
export interface GatewayRedis {
  /**
   * `cadre-gateway`: the stores' commands for every request, autopipelined (one write per event-loop turn). Bounded
   * (ConnectOptions.boundedWait), as is `heartbeats`: a request during an outage is answered 503, not left waiting.
   */
  commands: RedisClient;
  /** `cadre-gateway-queue`: BullMQ's queues (no autopipelining on a connection handed to BullMQ). */
  queue: RedisClient;
  /**
   * `cadre-gateway-heartbeats`: VM agents' heartbeats, one script call each, written at once rather than batched
   * (an autopipelined call costs a pipeline and its promises per batch: see RunStoreOptions.heartbeatRedis).
   */
  heartbeats: RedisClient;
  /** `cadre-gateway-sub`: the event fan-out's sharded subscriber. */
  subscriber: RedisClient;
}

/** Opens a gateway's connections (startGateway's, and a test's that checks how each one sends its commands). */
export function connectGatewayRedis(target: RedisTarget, onError: (err: Error) => void): GatewayRedis {
  return {
    commands: connectRedis(target, 'cadre-gateway', { autoPipelining: true, boundedWait: true, onError }),
    queue: connectRedis(target, 'cadre-gateway-queue', { onError }),
    heartbeats: connectRedis(target, 'cadre-gateway-heartbeats', { boundedWait: true, onError }),
    subscriber: connectRedis(target, 'cadre-gateway-sub', { shardedSubscriber: true, onError }),
  };
}
