-- Steering and follow-up queues (`--@include session-inputs`), for scripts that hold every key of the
-- session: the four session keys plus KEYS[5] the steer list, KEYS[6] the follow-up list, KEYS[7] the approvals
-- hash (earlier turns' approval records, see clearCalls) and KEYS[8] the grants set (decideSessionApproval-5.lua).
-- Each entry is JSON {input_id, content, queued_at}. The meta hash holds the modes: `steering_mode` and `follow_up_mode`
-- ('one-at-a-time' (default) | 'all') and `interrupt_mode` ('immediate' (default) | 'wait').
-- Every input gets exactly one outcome event after input_queued: input_delivered (with the turn) or input_dropped.
--@include session-log

local steerKey, followKey, approvalsKey, grantsKey

local function enterSessionInputs(KEYS)
  steerKey, followKey, approvalsKey, grantsKey = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
end

local function inputMode(field)
  local mode = redis.call('HGET', metaKey, field)
  if mode == false or mode == '' then return 'one-at-a-time' end
  return mode
end

-- Removes and returns the queued entries (decoded) a boundary takes: the oldest one, or all of them.
local function takeInputs(key, mode)
  local raw
  if mode == 'all' then
    raw = redis.call('LRANGE', key, 0, -1)
    redis.call('DEL', key)
  else
    local one = redis.call('LPOP', key)
    raw = one and { one } or {}
  end
  local out = {}
  for _, r in ipairs(raw) do table.insert(out, cjson.decode(r)) end
  return out
end

-- The inputs join the transcript as user messages; each gets its input_delivered event at `turn`.
local function deliverInputs(sessionId, maxLen, channel, kind, inputs, turn)
  for _, input in ipairs(inputs) do
    redis.call('RPUSH', transcriptKey, cjson.encode({ role = 'user', content = input.content }))
    appendEvent(sessionId, maxLen, channel, 'input_delivered',
      cjson.encode({ input_id = input.input_id, kind = kind, turn = turn, content = input.content }))
  end
end

-- Every key of the session, `ttl` seconds from now: a turn's start (the idle TTL) and a close (the retention).
-- Inputs left queued by a turn that ended early, earlier turns' records and the session's grants keep no expiry of
-- their own: a park (parkTurn-8.lua) kept them as long as the rest, and a turn's start that shortens the rest
-- shortens them too. A grant never outlives its session (it is the session's, no other session reads it).
local function everySessionKey()
  return { metaKey, eventsKey, transcriptKey, callsKey, steerKey, followKey, approvalsKey, grantsKey }
end

local function touchEverySessionKey(ttl)
  expireTogether(everySessionKey(), ttl)
end

-- Every key of the session lives at least until `at` (ms): GT never shortens an expiry already later (a park's
-- deadline), and a key that does not exist is left so. A park (parkTurn-8.lua) and a long turn's keep-alive
-- (keepSessionAlive-8.lua) move the keys this way.
local function keepEverySessionKeyUntil(at)
  for _, key in ipairs(everySessionKey()) do redis.call('PEXPIREAT', key, at, 'GT') end
end

-- Starts a turn on an idle session (as startTurn-8.lua does, with the session's tools): the caller pushes the
-- turn's user messages after this. Returns the new wake and turn number.
local function beginTurn(sessionId, maxLen, channel, messageId, content)
  local wake = redis.call('HINCRBY', metaKey, 'wake', 1)
  local turn = redis.call('HINCRBY', metaKey, 'turn', 1)
  redis.call('HSET', metaKey, 'status', 'running', 'message_id', messageId, 'lease', '', 'attempt', 0,
    'turn_usage', '{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}', 'turn_tools', '',
    'turn_system_context', '', 'turn_started_len', redis.call('LLEN', transcriptKey), 'turn_started_at', nowMs(), 'updated_at', nowMs())
  clearCalls(approvalsKey)
  appendEvent(sessionId, maxLen, channel, 'user_message', cjson.encode({ message_id = messageId, content = content, turn = turn }))
  return wake, turn
end

-- After a turn ended: queued inputs start the next one (steering left over from a turn that ended early first,
-- then follow-ups by the follow-up mode). Returns the new wake, or 0 when nothing was queued.
local function continueWithQueued(sessionId, maxLen, channel)
  local steers = takeInputs(steerKey, 'all')
  local follows = takeInputs(followKey, inputMode('follow_up_mode'))
  local first = steers[1] or follows[1]
  if not first then return 0 end
  local wake, turn = beginTurn(sessionId, maxLen, channel, first.input_id, first.content)
  deliverInputs(sessionId, maxLen, channel, 'steer', steers, turn)
  deliverInputs(sessionId, maxLen, channel, 'follow_up', follows, turn)
  touchEverySessionKey(tonumber(redis.call('HGET', metaKey, 'ttl')))
  return wake
end

-- Drops every input queued in `key` (of `kind`) with its input_dropped event; returns how many.
local function dropQueued(sessionId, maxLen, channel, key, kind, reason)
  local inputs = takeInputs(key, 'all')
  for _, input in ipairs(inputs) do
    appendEvent(sessionId, maxLen, channel, 'input_dropped', cjson.encode({ input_id = input.input_id, kind = kind, reason = reason }))
  end
  return #inputs
end

-- Drops every queued input, steers and follow-ups, with its input_dropped event; returns how many.
local function dropInputs(sessionId, maxLen, channel, reason)
  return dropQueued(sessionId, maxLen, channel, steerKey, 'steer', reason) + dropQueued(sessionId, maxLen, channel, followKey, 'follow_up', reason)
end
