--[[
  The lead adds the workers it spawned to the roster (as pending), fenced by the lead's lease. Idempotent per
  worker id (ids are numbered from a fixed base), so a retried plan step does not duplicate workers, and an entry
  that already exists is never overwritten.
  KEYS[1] meta   KEYS[2] events   KEYS[3] roster
  ARGV[1] lead worker id   ARGV[2] lead lease   ARGV[3] workers JSON array
  Returns the number of workers added, or ERR.task_not_found, ERR.task_finished, ERR.lease_lost.
]]
--@include errors
--@include task-log

if redis.call('EXISTS', metaKey) == 0 then return ERR.task_not_found end
if TERMINAL[redis.call('HGET', metaKey, 'status')] then return ERR.task_finished end
local lead = loadWorker(ARGV[1])
if not lead or lead.status ~= 'running' or lead.lease ~= ARGV[2] then return ERR.lease_lost end
local added = 0
for _, w in ipairs(cjson.decode(ARGV[3])) do
  added = added + redis.call('HSETNX', rosterKey, w.worker_id, cjson.encode(w))
end
return added
