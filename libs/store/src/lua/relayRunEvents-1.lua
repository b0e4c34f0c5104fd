--[[
  A worker relays events into the run's log, in order. Nothing its holder may legitimately send is refused (the
  original worker relays each event as its own unawaited request, so they race each other and the dispatch ack):
    - `streaming-complete` completes an active run and `error` fails it (a dispatch failure fails a queued run);
    - any other event on a queued run means the worker dispatched it: the run is running (as the original);
    - on a run that already ended, events are recorded and the status stays (late chunks, acks of a stop);
    - on a run no worker holds (awaiting_worker), events are recorded; only a terminal event changes it.
  Only a worker that names itself (worker_id / lease_id) and does not hold the run is refused.
  KEYS[1] <base>:workers
  ARGV[1] run id   ARGV[2] worker id ('' = not checked, as the original)   ARGV[3] lease id ('' = not checked)
  ARGV[4] events JSON: a list of {event_type, source, payload JSON, error text} tuples (payloads pass through untouched)   ARGV[5] max events   ARGV[6] channel   ARGV[7] retention seconds
  ARGV[8] batch id ('' = none): a batch retried after a lost reply is recognised and not written twice
  Returns the last seq; ERR.run_not_found, ERR.worker_mismatch.
]]
--@include errors
--@include run-log

local runId, workerId, leaseId, maxLen, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[5], ARGV[6]
local run = loadRun(runId)
if not run then return ERR.run_not_found end
local batchId = ARGV[8]
if batchId ~= '' and run.last_batch_id == batchId then return tonumber(run.seq) end
if (workerId ~= '' and run.worker_id ~= workerId) or (leaseId ~= '' and run.lease_id ~= leaseId) then return ERR.worker_mismatch end
local seq = 0
local now = nowMs()
local status = run.status
for _, e in ipairs(cjson.decode(ARGV[4])) do
  local eventType = e[1]
  seq = appendRunEvent(runId, maxLen, channel, eventType, e[2], e[3])
  if not RUN_TERMINAL[status] then
    if eventType == 'streaming-complete' then
      status = 'completed'
      finishRun(runId, status, now, '', tonumber(ARGV[7]))
    elseif eventType == 'error' then
      status = 'failed'
      finishRun(runId, status, now, e[4], tonumber(ARGV[7]))
    elseif status == 'queued' then
      status = 'running'
      redis.call('HSET', runMeta(runId), 'status', status)
    elseif status == 'paused' and run.paused_from == 'queued' then
      redis.call('HSET', runMeta(runId), 'paused_from', 'running')
    end
  end
end
redis.call('HSET', runMeta(runId), 'updated_at', now, 'last_batch_id', batchId)
return seq
