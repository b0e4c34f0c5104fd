--[[
  Creates a task: its meta hash, its roster, and the first event (task_queued, seq 1).
  KEYS[1] meta   KEYS[2] events   KEYS[3] roster
  ARGV[1] taskId
  ARGV[2] meta fields, JSON object of strings
  ARGV[3] roster, JSON array of worker objects (each with worker_id)
  ARGV[4] task_queued payload JSON
  ARGV[5] max events kept per task
  ARGV[6] appended channel
  Returns the creation time (ms) when created, 0 when the task already existed (nothing written).
]]
--@include task-log

if redis.call('EXISTS', metaKey) == 1 then return 0 end
local taskId, maxLen, channel = ARGV[1], ARGV[5], ARGV[6]
-- Every input is decoded before the first write: a script that fails half-way keeps what it wrote.
local fields = cjson.decode(ARGV[2])
local roster = cjson.decode(ARGV[3])

local now = nowMs()
-- One HSET per hash, whatever the number of fields and workers.
local metaFields = {}
for k, v in pairs(fields) do
  metaFields[#metaFields + 1] = k
  metaFields[#metaFields + 1] = v
end
redis.call('HSET', metaKey, 'status', 'queued', 'seq', 0, 'created_at', now, 'updated_at', now, unpack(metaFields))
local workers = {}
for _, w in ipairs(roster) do
  workers[#workers + 1] = w.worker_id
  workers[#workers + 1] = cjson.encode(w)
end
redis.call('HSET', rosterKey, unpack(workers))
appendEvent(taskId, maxLen, channel, 'task_queued', '', 0, ARGV[4])
return now
