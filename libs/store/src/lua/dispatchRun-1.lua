--[[
  The bound worker reports that it dispatched the run's query: queued -> running, event run-dispatched.
  KEYS[1] <base>:workers
  ARGV[1] base   ARGV[2] run id   ARGV[3] worker id   ARGV[4] lease id ('' = not checked, as the original)
  ARGV[5] payload JSON (worker_id, user_id, turn_ref, conversation_ref)   ARGV[6] max events   ARGV[7] channel
  Returns the new seq (0 when this worker had already dispatched it: a retry after a lost reply changes nothing);
  -1 no such run, -2 run finished, -3 worker does not hold the run, -7 run not queued.
]]
--@include run-log

local runId, workerId, leaseId = ARGV[2], ARGV[3], ARGV[4]
local run = loadRun(runId)
if not run then return -1 end
if RUN_TERMINAL[run.status] then return -2 end
if run.worker_id ~= workerId or (leaseId ~= '' and run.lease_id ~= leaseId) then return -3 end
if run.status == 'running' and run.dispatched_at and run.dispatched_at ~= '' then return 0 end
if run.status ~= 'queued' then return -7 end
local payload = cjson.decode(ARGV[5])
local now = nowMs()
redis.call('HSET', runMeta(runId), 'status', 'running', 'turn_ref', payload.turn_ref or '', 'dispatched_at', now, 'updated_at', now)
return appendRunEvent(runId, ARGV[6], ARGV[7], 'run-dispatched', 'worker', ARGV[5])
