--[[
  Creates a run in its workspace: status awaiting_worker at the back of the workspace queue, event run-created
  (source `api`, as the original). `conversation_ref` is the metadata's `conversation_ref` when the creator gave
  one, else `run-<id>` (as the original).
  KEYS[1] <base>:workers (every other key shares its base, see run-log.lua)
  ARGV[1] run id   ARGV[2] run fields JSON (strings; '' = unset)   ARGV[3] active-run cap
  ARGV[4] max events   ARGV[5] appended channel   ARGV[6] conversation ref ('' = run-<id>)
  Returns 1 created, 0 it already existed (a concurrent request with the same Idempotency-Key),
  ERR.run_cap_reached (the workspace's active-run cap is reached).
]]
--@include errors
--@include run-log

local runId, cap, maxLen, channel = ARGV[1], tonumber(ARGV[3]), ARGV[4], ARGV[5]
if redis.call('EXISTS', runMeta(runId)) == 1 then return 0 end
if redis.call('SCARD', activeKey) >= cap then return ERR.run_cap_reached end
local now = nowMs()
local fields = cjson.decode(ARGV[2])
local conversationRef = ARGV[6] ~= '' and ARGV[6] or ('run-' .. runId)
for k, v in pairs(fields) do redis.call('HSET', runMeta(runId), k, v) end
redis.call('HSET', runMeta(runId), 'run_id', runId, 'status', 'awaiting_worker', 'control_mode', 'agent_only',
  'conversation_ref', conversationRef, 'worker_id', '', 'vm_id', '', 'lease_id', '', 'turn_ref', '', 'attempts', 0,
  'seq', 0, 'created_at', now, 'updated_at', now)
redis.call('SADD', activeKey, runId)
redis.call('ZADD', base .. ':runs', now, runId)
-- The listing index keeps the newest 10,000 runs; active runs are also listed from the active set.
redis.call('ZREMRANGEBYRANK', base .. ':runs', 0, -10001)
redis.call('RPUSH', queueKey, runId)
appendRunEvent(runId, maxLen, channel, 'run-created', 'api', cjson.encode({ run_id = runId,
  workspace_id = fields.workspace_id, agent_id = orNull(fields.agent_id), conversation_ref = conversationRef,
  status = 'awaiting_worker', control_mode = 'agent_only' }))
return 1
