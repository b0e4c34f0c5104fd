--[[
  Appends a progress event (worker_phase, worker_tool_call) for the attempt that holds the lease.
  KEYS[1] meta   KEYS[2] events   KEYS[3] roster
  ARGV[1] taskId   ARGV[2] workerId   ARGV[3] lease   ARGV[4] event type   ARGV[5] payload JSON
  ARGV[6] max events   ARGV[7] channel
  Returns the new seq, or ERR.task_not_found, ERR.task_finished, ERR.lease_lost (lease not held).
]]
--@include errors
--@include task-log

local taskStatus = redis.call('HGET', metaKey, 'status')
if not taskStatus then return ERR.task_not_found end -- every task's meta has a status: none means no task
if TERMINAL[taskStatus] then return ERR.task_finished end
local w = loadWorker(ARGV[2])
if not w or w.status ~= 'running' or w.lease ~= ARGV[3] then return ERR.lease_lost end
return appendEvent(ARGV[1], ARGV[6], ARGV[7], ARGV[4], ARGV[2], w.attempt, ARGV[5])
