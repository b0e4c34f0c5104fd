--[[
  Cancels a task in one step: every started worker gets worker_failed (cancelled) and worker_exited, workers
  that never started are marked failed, the task ends `cancelled` with task_cancelled as its last event, and
  running loops are told through the cancel channel. Later writes from those loops are refused (task finished).
  Pending approvals of its workers are cancelled too (worker_approval_resolved, status cancelled).
  KEYS[1] meta   KEYS[2] events   KEYS[3] roster   KEYS[4] approvals hash
  ARGV[1] taskId   ARGV[2] reason   ARGV[3] retention seconds   ARGV[4] max events   ARGV[5] appended channel
  ARGV[6] cancel channel
  Returns 1 cancelled now, 2 already cancelled, ERR.task_not_found, ERR.task_finished.
]]
--@include errors
--@include task-log

if redis.call('EXISTS', metaKey) == 0 then return ERR.task_not_found end
local status = redis.call('HGET', metaKey, 'status')
if status == 'cancelled' then return 2 end
if TERMINAL[status] then return ERR.task_finished end
local taskId, reason, maxLen, channel = ARGV[1], ARGV[2], ARGV[4], ARGV[5]

-- Workers in a stable order (roster hash order is not), so the log reads the same on every replay.
local ids = redis.call('HKEYS', rosterKey)
table.sort(ids)
local failed = cjson.encode({ reason = 'cancelled', message = reason })
local exited = cjson.encode({ parent_task_id = taskId })
for _, id in ipairs(ids) do
  local w = loadWorker(id)
  if w.status == 'running' or w.status == 'waiting' then
    appendEvent(taskId, maxLen, channel, 'worker_failed', id, w.attempt, failed)
    appendEvent(taskId, maxLen, channel, 'worker_exited', id, w.attempt, exited)
  end
  if w.status ~= 'completed' and w.status ~= 'failed' then
    w.status, w.failure_reason, w.lease = 'failed', 'cancelled', ''
    saveWorker(w)
  end
end
local now = nowMs()
-- Pending approvals in a stable order (by when they were asked, then id).
local pending = {}
for _, r in ipairs(redis.call('HVALS', KEYS[4])) do
  local a = cjson.decode(r)
  if a.status == 'pending' then table.insert(pending, a) end
end
table.sort(pending, function(x, y)
  if x.created_at ~= y.created_at then return x.created_at < y.created_at end
  return x.approval_id < y.approval_id
end)
for _, a in ipairs(pending) do
  a.status, a.decision_reason, a.decided_by, a.decided_at = 'cancelled', reason, '', now
  redis.call('HSET', KEYS[4], a.approval_id, cjson.encode(a))
  local w = loadWorker(a.worker_id)
  appendEvent(taskId, maxLen, channel, 'worker_approval_resolved', a.worker_id, w and w.attempt or 0, cjson.encode({
    approval_id = a.approval_id, approved = false, status = 'cancelled', reason = reason, decided_by = '' }))
end
redis.call('HSET', metaKey, 'status', 'cancelled', 'finished_at', now, 'updated_at', now, 'failure_reason', reason)
appendEvent(taskId, maxLen, channel, 'task_cancelled', '', 0, cjson.encode({ reason = reason }))
expireTask(tonumber(ARGV[3]))
redis.call('PUBLISH', ARGV[6], taskId)
return 1
