--[[
  A job process takes (or retakes) a worker's attempt. The lease is the BullMQ lock token of the job run:
  if the roster shows another lease still running, that attempt was lost (its lock expired), so it is closed in
  the log (worker_failed worker_lost, worker_exited) before the new attempt starts. Any later write from the
  old lease is refused by the fence check in the other scripts.
  KEYS[1] meta   KEYS[2] events   KEYS[3] roster   KEYS[4] parked hash (a worker's transcript saved at its approvals)
  ARGV[1] taskId   ARGV[2] workerId   ARGV[3] lease   ARGV[4] host id   ARGV[5] max events   ARGV[6] channel
  ARGV[7] '1': the lead's claim: also return the roster (the lead reads its workers' results next);
          '0': a worker's claim: also return its parked transcript (false when it never parked)
  ARGV[8] a worker's first worker_phase payload JSON, or '': a new attempt with no parked transcript starts its
          loop at turn 1, so its phase is appended here, after worker_started, instead of by a script of its own
  Returns { code, attempt, worker JSON, task context JSON (task_id, workspace_id, goal, mode, team),
            roster as HGETALL's flat list | parked JSON or false, 1 when ARGV[8]'s phase is in the log (appended by
            this claim, or by the first run of a replayed one: the worker's phase_attempt) else 0 }:
     1 new attempt started (worker_started appended)    2 resumed after waiting for its children or approvals
     3 this lease already holds the attempt
    ERR.task_not_found   ERR.task_finished   ERR.worker_not_found   ERR.worker_finished
  The job needs the worker and the task's goal and team (the lead its team's results, a worker whether it resumes
  a parked transcript): returning them here saves it those round trips.
]]
--@include errors
--@include task-log

-- The status and the context in one read. Every task's meta has a status (createTask writes it with the rest):
-- none means no task.
local m = redis.call('HMGET', metaKey, 'status', 'task_id', 'workspace_id', 'goal', 'mode', 'team')
local taskStatus = m[1]
if not taskStatus then return { ERR.task_not_found, 0 } end
if TERMINAL[taskStatus] then return { ERR.task_finished, 0 } end
local taskId, workerId, lease, hostId, maxLen, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local w = loadWorker(workerId)
if not w then return { ERR.worker_not_found, 0 } end
if w.status == 'completed' or w.status == 'failed' then return { ERR.worker_finished, w.attempt } end
-- A worker's parked transcript (false when it never parked, and for the lead, which does not park).
local function parkedState()
  if ARGV[7] == '1' then return false end
  return redis.call('HGET', KEYS[4], workerId)
end
local function claimed(code, parked, phaseAppended)
  local context = cjson.encode({ task_id = m[2], workspace_id = m[3], goal = m[4], mode = m[5], team = m[6] })
  if ARGV[7] == '1' then return { code, w.attempt, cjson.encode(w), context, redis.call('HGETALL', rosterKey), 0 } end
  return { code, w.attempt, cjson.encode(w), context, parked, phaseAppended }
end
-- A replay: ioredis sends a command again when the connection that carried it dropped before the reply, so the
-- script may already have run for this lease. The phase that first run appended is reported again, or the loop
-- would append it a second time.
if w.status == 'running' and w.lease == lease then return claimed(3, parkedState(), w.phase_attempt == w.attempt and 1 or 0) end

if w.status == 'waiting' then
  -- The first phase a replay of this claim reports: none, as this claim appends none.
  w.status, w.lease, w.phase_attempt = 'running', lease, nil
  saveWorker(w)
  return claimed(2, parkedState(), 0)
end

if w.status == 'running' then
  local lost = cjson.encode({ reason = 'worker_lost', message = 'attempt ' .. w.attempt .. ' lost its lease on host ' .. (w.host_id or '?') })
  appendEvent(taskId, maxLen, channel, 'worker_failed', workerId, w.attempt, lost)
  appendEvent(taskId, maxLen, channel, 'worker_exited', workerId, w.attempt, cjson.encode({ parent_task_id = taskId }))
end

w.attempt = (w.attempt or 0) + 1
w.status, w.lease, w.host_id = 'running', lease, hostId
local parked = parkedState()
local logsPhase = ARGV[7] ~= '1' and not parked and ARGV[8] ~= ''
if logsPhase then w.phase_attempt = w.attempt end
saveWorker(w)
appendEvent(taskId, maxLen, channel, 'worker_started', workerId, w.attempt, cjson.encode({ host_id = hostId, role = w.role }))
if logsPhase then appendEvent(taskId, maxLen, channel, 'worker_phase', workerId, w.attempt, ARGV[8]) end
if taskStatus == 'queued' then
  local now = nowMs()
  redis.call('HSET', metaKey, 'status', 'running', 'started_at', now, 'updated_at', now)
end
return claimed(1, parked, logsPhase and 1 or 0)
