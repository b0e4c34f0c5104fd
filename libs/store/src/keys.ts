import { createHash } from 'node:crypto';

/**
 * Every Redis key Cadre uses comes from here. Keys of one task share the hash tag `{t:<taskId>}` so each Lua
 * script touches one slot and the same code runs on Redis Cluster.
 *
 *   <prefix>:{t:<id>}:meta     hash: task fields, `seq` (last appended seq), `status`
 *   <prefix>:{t:<id>}:events   stream: one entry per event, entry id `<seq>-0`
 *   <prefix>:{t:<id>}:roster   hash: worker_id → worker JSON (role, status, attempt, lease, result, ...)
 *   <prefix>:idem:{<ws>}:<sha256(key)>   string: task id created for an Idempotency-Key
 *   <prefix>:stats:tasks       hash: status → count of tasks that reached it (metrics only)
 *
 * Pub/sub channels (not slot-bound): `<prefix>:appended` (message `<taskId> <seq>`) wakes event tails;
 * `<prefix>:cancel` (message `<taskId>`) reaches running agent loops.
 */
export interface TaskKeys {
  meta: string;
  events: string;
  roster: string;
}

export class KeyBuilder {
  readonly prefix: string;

  constructor(prefix = 'cadre') {
    this.prefix = prefix;
  }

  task(taskId: string): TaskKeys {
    const tag = `${this.prefix}:{t:${taskId}}`;
    return { meta: `${tag}:meta`, events: `${tag}:events`, roster: `${tag}:roster` };
  }

  idempotency(workspaceId: string, key: string): string {
    const digest = createHash('sha256').update(key).digest('hex');
    return `${this.prefix}:idem:{${workspaceId}}:${digest}`;
  }

  taskStats(): string {
    return `${this.prefix}:stats:tasks`;
  }

  appendedChannel(): string {
    return `${this.prefix}:appended`;
  }

  cancelChannel(): string {
    return `${this.prefix}:cancel`;
  }

  /** BullMQ's own prefix: a hash tag keeps each queue's keys in one slot, as BullMQ requires on Cluster. */
  bullPrefix(): string {
    return `{${this.prefix}:bull}`;
  }
}
