--[[
  A job process takes (or retakes) a worker's attempt. The lease is the BullMQ lock token of the job run:
  if the roster shows another lease still running, that attempt was lost (its lock expired), so it is closed in
  the log (worker_failed worker_lost, worker_exited) before the new attempt starts. Any later write from the
  old lease is refused by the fence check in the other scripts.
  KEYS[1] meta   KEYS[2] events   KEYS[3] roster
  ARGV[1] taskId   ARGV[2] workerId   ARGV[3] lease   ARGV[4] host id   ARGV[5] max events   ARGV[6] channel
  ARGV[7] '1': also return the roster (the lead reads its workers' results next)
  Returns { code, attempt, worker JSON, task context JSON (task_id, workspace_id, goal, mode, team, roster_size)
            [, roster as HGETALL's flat list] }:
     1 new attempt started (worker_started appended)    2 resumed after waiting for its children
     3 this lease already holds the attempt
    ERR.task_not_found   ERR.task_finished   ERR.worker_not_found   ERR.worker_finished
  The job needs the worker and the task's goal and team (and the lead its team's results): returning them here
  saves it those round trips.
]]
--@include errors
--@include task-log

-- Every task's meta has a status (createTask writes it with the rest): none means no task.
local taskStatus = redis.call('HGET', metaKey, 'status')
if not taskStatus then return { ERR.task_not_found, 0 } end
if TERMINAL[taskStatus] then return { ERR.task_finished, 0 } end
local taskId, workerId, lease, hostId, maxLen, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local w = loadWorker(workerId)
if not w then return { ERR.worker_not_found, 0 } end
if w.status == 'completed' or w.status == 'failed' then return { ERR.worker_finished, w.attempt } end
local function claimed(code)
  local m = redis.call('HMGET', metaKey, 'task_id', 'workspace_id', 'goal', 'mode', 'team')
  local context = cjson.encode({ task_id = m[1], workspace_id = m[2], goal = m[3], mode = m[4], team = m[5],
    roster_size = redis.call('HLEN', rosterKey) })
  if ARGV[7] == '1' then return { code, w.attempt, cjson.encode(w), context, redis.call('HGETALL', rosterKey) } end
  return { code, w.attempt, cjson.encode(w), context }
end
if w.status == 'running' and w.lease == lease then return claimed(3) end

if w.status == 'waiting' then
  w.status, w.lease = 'running', lease
  saveWorker(w)
  return claimed(2)
end

if w.status == 'running' then
  local lost = cjson.encode({ reason = 'worker_lost', message = 'attempt ' .. w.attempt .. ' lost its lease on host ' .. (w.host_id or '?') })
  appendEvent(taskId, maxLen, channel, 'worker_failed', workerId, w.attempt, lost)
  appendEvent(taskId, maxLen, channel, 'worker_exited', workerId, w.attempt, cjson.encode({ parent_task_id = taskId }))
end

w.attempt = (w.attempt or 0) + 1
w.status, w.lease, w.host_id = 'running', lease, hostId
saveWorker(w)
appendEvent(taskId, maxLen, channel, 'worker_started', workerId, w.attempt, cjson.encode({ host_id = hostId, role = w.role }))
if taskStatus == 'queued' then
  local now = nowMs()
  redis.call('HSET', metaKey, 'status', 'running', 'started_at', now, 'updated_at', now)
end
return claimed(1)
