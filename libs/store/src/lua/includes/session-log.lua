-- Shared by every session script (`--@include session-log`).
-- KEYS[1] meta hash, KEYS[2] events stream, KEYS[3] transcript list, KEYS[4] calls hash; all share the
-- session's hash tag {s:<id>}. The meta hash holds the session's fields plus `seq` (last seq), `status`
-- (idle | running | waiting_tool | closed), `lease` (the BullMQ lock token of the turn attempt holding the
-- session, '' when none), `wake` (how many times a turn was started or resumed: it names the turn's job).
--@include event-log

local metaKey, eventsKey, transcriptKey, callsKey

local function enterSessionLog(KEYS)
  metaKey, eventsKey, transcriptKey, callsKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
end

-- A session event: t type, p payload JSON. The log id (what the appended channel carries) is the session id.
local function appendEvent(sessionId, maxLen, channel, eventType, payload)
  return appendToLog('session', metaKey, eventsKey, sessionId, maxLen, channel, { 't', eventType, 'p', payload })
end

-- Calls still waiting for a client's result or an approval, in the model's order.
local function pendingCalls()
  local pending = {}
  local flat = redis.call('HGETALL', callsKey)
  for i = 2, #flat, 2 do
    local call = cjson.decode(flat[i])
    if call.status == 'pending' then table.insert(pending, call) end
  end
  table.sort(pending, function(a, b) return a.order < b.order end)
  return pending
end

-- Clears the current turn's calls for the next turn. Their approval records (all settled by now: a turn ends
-- before the next starts) move to the session's approvals hash (`approvalsKey`, id → the call JSON), where
-- GET /api/approvals/:id reads them for as long as the session's keys live (the caller gives it their expiry).
local function clearCalls(approvalsKey)
  local flat = redis.call('HGETALL', callsKey)
  for i = 2, #flat, 2 do
    local call = cjson.decode(flat[i])
    if call.approval then redis.call('HSET', approvalsKey, call.approval.approval_id, flat[i]) end
  end
  redis.call('DEL', callsKey)
end

-- Every key of a session expires at the same millisecond: none outlives the meta hash, none goes before it.
-- `keys` (the session's keys the script holds) live as long as the session may still be used: `ttl` seconds from now.
local function expireTogether(keys, ttl)
  local at = nowMs() + ttl * 1000
  for _, key in ipairs(keys) do redis.call('PEXPIREAT', key, at) end
end

-- The four keys above: all a session has when it is created (createSession-4.lua). A turn's start and a close
-- set every key of the session (touchEverySessionKey in session-inputs.lua).
local function touchSession(ttl)
  expireTogether({ metaKey, eventsKey, transcriptKey, callsKey }, ttl)
end

-- A key written after the session's keys got their expiry (the turn's calls, a queued input, a grant) expires
-- with them, to the millisecond: at the meta hash's expiry, whether a turn's start, a park (parkTurn-8.lua) or a long
-- turn's keep-alive (keepSessionAlive-8.lua) set it. A meta hash with no expiry (none today: every caller checks it
-- exists, and every script that writes it sets one) gives the key the session's `ttl` from now instead, so no key is
-- ever kept for ever; with no meta hash at all (no `ttl`) the key goes at once, as nothing outlives the meta hash.
local function liveWithSession(key)
  local at = redis.call('PEXPIRETIME', metaKey)
  if at <= 0 then at = nowMs() + (tonumber(redis.call('HGET', metaKey, 'ttl')) or 0) * 1000 end
  redis.call('PEXPIREAT', key, at)
end

-- Ends the turn in progress (if any): pending client calls are settled as cancelled and the turn gets its
-- turn_complete with `stopReason`. Returns the turn's start (ms, 0 if unknown) when a turn was running, else
-- false (0 is true in Lua: callers that only ask whether a turn ended test it as before).
local function endTurn(sessionId, maxLen, channel, stopReason, now)
  local status = redis.call('HGET', metaKey, 'status')
  if status ~= 'running' and status ~= 'waiting_tool' then return false end
  for _, call in ipairs(pendingCalls()) do
    call.status, call.success, call.result = 'cancelled', false, 'error: the turn ended (' .. stopReason .. ') before this call returned'
    -- An approval still waiting is cancelled with its call: a late decision finds it decided (409).
    if call.approval and call.approval.status == 'pending' then
      call.approval.status, call.approval.decided_at, call.approval.decided_by = 'cancelled', now, ''
      call.approval.decision_reason = 'the turn ended (' .. stopReason .. ')'
      appendEvent(sessionId, maxLen, channel, 'approval_resolved', cjson.encode({
        approval_id = call.approval.approval_id, tool_call_id = call.tool_call_id, tool_name = call.tool_name,
        approved = false, status = 'cancelled', reason = call.approval.decision_reason, decided_by = '',
      }))
    end
    redis.call('HSET', callsKey, call.tool_call_id, cjson.encode(call))
  end
  local m = redis.call('HMGET', metaKey, 'message_id', 'turn_usage', 'turn_started_at')
  redis.call('HSET', metaKey, 'status', 'idle', 'lease', '', 'updated_at', now)
  appendEvent(sessionId, maxLen, channel, 'turn_complete',
    cjson.encode({ message_id = m[1], usage = cjson.decode(m[2] or '{}'), stop_reason = stopReason }))
  return tonumber(m[3]) or 0
end
