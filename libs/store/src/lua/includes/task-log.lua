-- Shared by every task script (`--@include task-log`).
-- KEYS[1] meta hash, KEYS[2] events stream, KEYS[3] roster hash; all share the task's hash tag.
--@include event-log

local metaKey, eventsKey, rosterKey

local function enterTaskLog(KEYS)
  metaKey, eventsKey, rosterKey = KEYS[1], KEYS[2], KEYS[3]
end

local TERMINAL = { completed = true, failed = true, cancelled = true }

-- A team event: t type, w worker id ('' for task events), a attempt, p payload JSON. The log id is the task id.
-- Each event moves the task's updated_at: a task whose updated_at is old has not progressed (read repair skips the rest).
local function appendEvent(taskId, maxLen, channel, eventType, workerId, attempt, payload)
  local seq = appendToLog('task', metaKey, eventsKey, taskId, maxLen, channel, { 't', eventType, 'w', workerId, 'a', attempt, 'p', payload })
  redis.call('HSET', metaKey, 'updated_at', nowMs())
  return seq
end

local function loadWorker(workerId)
  local raw = redis.call('HGET', rosterKey, workerId)
  if not raw then return nil end
  return cjson.decode(raw)
end

local function saveWorker(w)
  redis.call('HSET', rosterKey, w.worker_id, cjson.encode(w))
end

-- A finished task keeps its log for `retentionSec`, then all of its keys go together.
local function expireTask(retentionSec)
  redis.call('EXPIRE', metaKey, retentionSec)
  redis.call('EXPIRE', eventsKey, retentionSec)
  redis.call('EXPIRE', rosterKey, retentionSec)
end
