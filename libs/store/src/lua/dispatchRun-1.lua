--[[
  The bound worker reports that it dispatched the run's query (worker-dispatched): turn_ref and run-dispatched are
  recorded, and a queued run becomes running. The original worker sends this only after its query was sent, so
  its relays may have arrived first (the run is already running) or the run may have ended meanwhile (stopped, or
  even completed): the ack is still recorded, and a run that ended keeps its status.
  KEYS[1] <base>:workers
  ARGV[1] run id   ARGV[2] worker id   ARGV[3] lease id ('' = not checked, as the original)
  ARGV[4] payload JSON (worker_id, user_id, turn_ref, conversation_ref; null when not sent)   ARGV[5] max events
  ARGV[6] channel
  Returns the seq of the run-dispatched event (a repeat by the same worker changes nothing and returns the first
  one's seq); ERR.run_not_found, ERR.worker_mismatch (another worker, another lease, another user).
]]
--@include errors
--@include run-log

local runId, workerId, leaseId = ARGV[1], ARGV[2], ARGV[3]
local run = loadRun(runId)
if not run then return ERR.run_not_found end
if run.worker_id ~= workerId or (leaseId ~= '' and run.lease_id ~= leaseId) then return ERR.worker_mismatch end
local payload = cjson.decode(ARGV[4])
-- As the original: a worker of another user is not the holder.
if type(payload.user_id) == 'string' and run.user_id ~= '' and run.user_id ~= payload.user_id then return ERR.worker_mismatch end
if run.dispatched_at and run.dispatched_at ~= '' then return tonumber(run.dispatched_seq or '0') end
local now = nowMs()
local turnRef = type(payload.turn_ref) == 'string' and payload.turn_ref or ''
redis.call('HSET', runMeta(runId), 'turn_ref', turnRef, 'dispatched_at', now, 'updated_at', now)
-- As the original, a conversation_ref in the ack becomes the run's.
if type(payload.conversation_ref) == 'string' and payload.conversation_ref ~= '' then
  redis.call('HSET', runMeta(runId), 'conversation_ref', payload.conversation_ref)
end
if run.status == 'queued' then
  redis.call('HSET', runMeta(runId), 'status', 'running')
elseif run.status == 'paused' then
  redis.call('HSET', runMeta(runId), 'paused_from', 'running')
end
local seq = appendRunEvent(runId, ARGV[5], ARGV[6], 'run-dispatched', 'worker', cjson.encode({
  worker_id = workerId, user_id = payload.user_id, turn_ref = payload.turn_ref,
  conversation_ref = (type(payload.conversation_ref) == 'string' and payload.conversation_ref ~= '') and payload.conversation_ref or run.conversation_ref }))
redis.call('HSET', runMeta(runId), 'dispatched_seq', seq)
return seq
