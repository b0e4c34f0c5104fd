--[[
  The bound worker relays events into the run's log, in order. `streaming-complete` completes the run and
  `error` fails it; either must be the batch's last event (checked by the caller).
  KEYS[1] <base>:workers
  ARGV[1] base   ARGV[2] run id   ARGV[3] worker id ('' = not checked, as the original)   ARGV[4] lease id ('' = not checked)
  ARGV[5] events JSON: a list of {event_type, source, payload JSON, error text} tuples (payloads pass through untouched)   ARGV[6] max events   ARGV[7] channel   ARGV[8] retention seconds
  ARGV[9] batch id ('' = none): a batch retried after a lost reply is recognised and not written twice
  Returns the last seq; -1 no such run, -2 run finished, -3 worker does not hold the run, -7 run not dispatched.
]]
--@include run-log

local runId, workerId, leaseId, maxLen, channel = ARGV[2], ARGV[3], ARGV[4], ARGV[6], ARGV[7]
local run = loadRun(runId)
if not run then return -1 end
local batchId = ARGV[9]
if batchId ~= '' and run.last_batch_id == batchId then return tonumber(run.seq) end
if RUN_TERMINAL[run.status] then return -2 end
if (workerId ~= '' and run.worker_id ~= workerId) or (leaseId ~= '' and run.lease_id ~= leaseId) then return -3 end
-- Only a dispatched run takes relays: running, or paused while running (a run paused before dispatch has none).
if run.status ~= 'running' and not (run.status == 'paused' and run.paused_from == 'running') then return -7 end
local seq = 0
local now = nowMs()
for _, e in ipairs(cjson.decode(ARGV[5])) do
  local eventType = e[1]
  seq = appendRunEvent(runId, maxLen, channel, eventType, e[2], e[3])
  if eventType == 'streaming-complete' then
    finishRun(runId, 'completed', now, '', tonumber(ARGV[8]))
  elseif eventType == 'error' then
    finishRun(runId, 'failed', now, e[4], tonumber(ARGV[8]))
  end
end
redis.call('HSET', runMeta(runId), 'updated_at', now, 'last_batch_id', batchId)
return seq
