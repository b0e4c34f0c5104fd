--[[
  Ends a worker's attempt, and (for the lead) optionally the task, in one step.
  KEYS[1] meta   KEYS[2] events   KEYS[3] roster
  ARGV[1] taskId   ARGV[2] workerId
  ARGV[3] lease ('' = the attempt was lost without a process to speak for it: only allowed while running)
  ARGV[4] outcome: completed | failed | released (handed back on shutdown) | waiting (for its children)
  ARGV[5] outcome payload JSON (completed: {result, usage}; failed/released: {reason, message})
  ARGV[6] task outcome: '' | completed | failed      ARGV[7] task payload JSON
  ARGV[8] retention seconds   ARGV[9] max events   ARGV[10] channel
  Returns the last seq written (0 if none), or ERR.task_not_found, ERR.task_finished, ERR.lease_lost.
]]
--@include errors
--@include task-log

local taskStatus = redis.call('HGET', metaKey, 'status')
if not taskStatus then return ERR.task_not_found end -- every task's meta has a status: none means no task
if TERMINAL[taskStatus] then return ERR.task_finished end
local taskId, workerId, lease, outcome = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local maxLen, channel = ARGV[9], ARGV[10]
local w = loadWorker(workerId)
if not w or w.status ~= 'running' or (lease ~= '' and w.lease ~= lease) then return ERR.lease_lost end

-- Both payloads are decoded before the first write: a script that fails half-way keeps what it wrote.
local payload = cjson.decode(ARGV[5])
local taskOutcome = ARGV[6]
local taskPayload = taskOutcome ~= '' and cjson.decode(ARGV[7]) or nil
local seq = 0
local exited = cjson.encode({ parent_task_id = taskId })
if outcome == 'completed' then
  w.status, w.result, w.usage = 'completed', payload.result, payload.usage
  appendEvent(taskId, maxLen, channel, 'worker_completed', workerId, w.attempt, ARGV[5])
  seq = appendEvent(taskId, maxLen, channel, 'worker_exited', workerId, w.attempt, exited)
elseif outcome == 'failed' or outcome == 'released' then
  -- released: the attempt ends but the worker goes back to pending, so the job's next run starts attempt+1.
  w.status = (outcome == 'failed') and 'failed' or 'pending'
  w.failure_reason = payload.reason
  appendEvent(taskId, maxLen, channel, 'worker_failed', workerId, w.attempt, ARGV[5])
  seq = appendEvent(taskId, maxLen, channel, 'worker_exited', workerId, w.attempt, exited)
else -- waiting
  w.status = 'waiting'
end
w.lease = ''
saveWorker(w)

if taskOutcome ~= '' then
  local now = nowMs()
  redis.call('HSET', metaKey, 'status', taskOutcome, 'finished_at', now, 'updated_at', now,
    'result', taskPayload.result or '', 'failure_reason', taskPayload.reason or '',
    'usage', cjson.encode(taskPayload.usage or {}))
  seq = appendEvent(taskId, maxLen, channel, 'task_' .. taskOutcome, '', 0, ARGV[7])
  expireTask(tonumber(ARGV[8]))
end
return seq
