--[[
  An operator's control action on one run. Guarded by the run's state: an action that does not fit is refused
  and nothing changes. Bound runs get a command for their worker; unbound ones change at once.
    pause   awaiting_worker|queued|running -> paused (an unbound run leaves the queue)
    resume  paused -> the state it was paused from (an unbound run goes back to the front of the queue)
    stop    any active state -> stopped
    set-control-mode  any active state; control_mode changes
  KEYS[1] <base>:workers
  ARGV[1] run id   ARGV[2] action   ARGV[3] control mode ('' unless set-control-mode)
  ARGV[4] requested by   ARGV[5] command id   ARGV[6] max events   ARGV[7] channel   ARGV[8] retention seconds
  Returns { the seq of the run-control event, the approvals a stop cancelled (records' JSON) }; or
  { ERR.run_not_found }, { ERR.run_finished }, { ERR.invalid_state } (the action does not fit the run's state).
]]
--@include errors
--@include run-log

local runId, action, mode, requestedBy, commandId = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local maxLen, channel = ARGV[6], ARGV[7]
local run = loadRun(runId)
if not run then return { ERR.run_not_found } end
if RUN_TERMINAL[run.status] then return { ERR.run_finished } end
local now = nowMs()
local bound = run.worker_id ~= ''
if action == 'stop' then
  return { stopRun(run, commandId, requestedBy, now, maxLen, channel, tonumber(ARGV[8]), false), cancelledApprovals }
end

local status = run.status
local controlMode = run.control_mode
if action == 'pause' then
  if status == 'paused' then return { ERR.invalid_state } end
  redis.call('HSET', runMeta(runId), 'status', 'paused', 'paused_from', status)
  if not bound then redis.call('LREM', queueKey, 0, runId) end
  status = 'paused'
elseif action == 'resume' then
  if status ~= 'paused' then return { ERR.invalid_state } end
  status = run.paused_from
  if not bound then
    status = 'awaiting_worker'
    redis.call('LPUSH', queueKey, runId)
  end
  redis.call('HSET', runMeta(runId), 'status', status, 'paused_from', '')
elseif action == 'set-control-mode' then
  redis.call('HSET', runMeta(runId), 'control_mode', mode)
  controlMode = mode
else
  return { ERR.invalid_state }
end
redis.call('HSET', runMeta(runId), 'updated_at', now)
if bound then queueCommand(run, commandId, action, controlMode, requestedBy, now) end
return { appendControlEvent(runId, maxLen, channel, action, requestedBy, controlMode, status, bound and commandId or '', false) }
