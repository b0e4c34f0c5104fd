-- Shared by every task script (inlined by the script loader at `--@include task-log`).
-- KEYS[1] meta hash, KEYS[2] events stream, KEYS[3] roster hash; all share the task's hash tag.

local metaKey, eventsKey, rosterKey = KEYS[1], KEYS[2], KEYS[3]

local function nowMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local TERMINAL = { completed = true, failed = true, cancelled = true }

-- Appends one event: seq is assigned here, atomically with the append, so the log has no gaps.
-- The stream entry id is `<seq>-0`, which lets readers resume with XRANGE (<after_seq> directly.
local function appendEvent(taskId, maxLen, channel, eventType, workerId, attempt, payload)
  local seq = redis.call('HINCRBY', metaKey, 'seq', 1)
  redis.call('XADD', eventsKey, 'MAXLEN', maxLen, seq .. '-0',
    't', eventType, 'w', workerId, 'a', attempt, 'ts', nowMs(), 'p', payload)
  redis.call('PUBLISH', channel, taskId .. ' ' .. seq)
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
