--[[
  Parks a worker at a tool-call boundary: its calls that need a decision become pending approvals (one
  worker_approval_requested event each, in the model's order), the transcript up to the tool calls is saved, and
  the worker goes to `waiting` without a lease, so its job can leave the worker slot until the decisions come.
  KEYS[1] meta   KEYS[2] events   KEYS[3] roster   KEYS[4] approvals hash   KEYS[5] parked hash
  ARGV[1] taskId   ARGV[2] workerId   ARGV[3] lease   ARGV[4] park state JSON   ARGV[5] approvals JSON array
  ARGV[6] max events   ARGV[7] channel   ARGV[8] retention seconds
  Returns the last seq written, or ERR.task_not_found, ERR.task_finished, ERR.lease_lost (lease not held).
]]
--@include errors
--@include task-log

if redis.call('EXISTS', metaKey) == 0 then return ERR.task_not_found end
if TERMINAL[redis.call('HGET', metaKey, 'status')] then return ERR.task_finished end
local taskId, workerId, lease, maxLen, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[6], ARGV[7]
local w = loadWorker(workerId)
if not w or w.status ~= 'running' or w.lease ~= lease then return ERR.lease_lost end
local approvals = cjson.decode(ARGV[5])
local seq = 0
for _, a in ipairs(approvals) do
  redis.call('HSET', KEYS[4], a.approval_id, cjson.encode(a))
  seq = appendEvent(taskId, maxLen, channel, 'worker_approval_requested', workerId, w.attempt, cjson.encode({
    approval_id = a.approval_id, tool_name = a.tool_name, call_id = a.call_id, arguments = a.arguments,
    reason = a.reason, timeout_secs = a.timeout_secs }))
end
redis.call('HSET', KEYS[5], workerId, ARGV[4])
-- Bounded like the rest of the task: the task's end does not know these keys, so they carry their own expiry.
redis.call('EXPIRE', KEYS[4], tonumber(ARGV[8]))
redis.call('EXPIRE', KEYS[5], tonumber(ARGV[8]))
w.status, w.lease = 'waiting', ''
saveWorker(w)
return seq
