--[[
  Lists a new task in its workspace: the newest-first listing index and the set of unfinished tasks (stop-all's
  scope). Both keys share the workspace's hash tag, so this is one script on one slot (the task's own keys live
  in its slot, hence a second script after createTask).
  KEYS[1] the workspace's task listing index (zset, every score 0, ordered by member)
  KEYS[2] the workspace's unfinished tasks (set)
  ARGV[1] listing member `<inverted created ms, 13 digits>:<taskId>` (ascending member order = newest first)
  ARGV[2] taskId
  ARGV[3] entries kept in the index (the oldest beyond are dropped)
  ARGV[4] members from this one on (older than the retention) are dropped
  Returns 1 when the task was not listed yet, 0 when it was (a relisting).
]]
local added = redis.call('ZADD', KEYS[1], 0, ARGV[1])
redis.call('SADD', KEYS[2], ARGV[2])
-- Bounded: by count, and by age (a finished task's keys are gone after the retention; its entry would list nothing).
redis.call('ZREMRANGEBYLEX', KEYS[1], '[' .. ARGV[4], '+')
redis.call('ZREMRANGEBYRANK', KEYS[1], tonumber(ARGV[3]), -1)
return added
