--[[
  The lead adds the workers it spawned to the roster (as pending), fenced by the lead's lease. Idempotent per
  worker id (ids are numbered from a fixed base), so a retried plan step does not duplicate workers, and an entry
  that already exists is never overwritten.
  KEYS[1] meta   KEYS[2] events   KEYS[3] roster
  ARGV[1] lead worker id   ARGV[2] lead lease   ARGV[3] workers JSON array
  Returns the number of workers added, or -1 no such task, -2 task finished, -3 fenced.
]]
--@include task-log

if redis.call('EXISTS', metaKey) == 0 then return -1 end
if TERMINAL[redis.call('HGET', metaKey, 'status')] then return -2 end
local lead = loadWorker(ARGV[1])
if not lead or lead.status ~= 'running' or lead.lease ~= ARGV[2] then return -3 end
local added = 0
for _, w in ipairs(cjson.decode(ARGV[3])) do
  added = added + redis.call('HSETNX', rosterKey, w.worker_id, cjson.encode(w))
end
return added
