--[[
  abort / abort_and_prompt: every queued steer and follow-up is dropped (input_dropped, reason `abort`), the
  turn in progress ends (turn_complete, stop_reason `cancelled`) and running loops are told on the cancel
  channel; with a prompt, a new turn starts with it in the same step, so nothing can slip in between.
  KEYS[1] meta   KEYS[2] events   KEYS[3] transcript   KEYS[4] calls   KEYS[5] steer list   KEYS[6] follow-up list
  KEYS[7] approvals (earlier turns' records)   KEYS[8] grants
  ARGV[1] sessionId   ARGV[2] max events   ARGV[3] appended channel   ARGV[4] cancel channel
  ARGV[5] prompt message_id ('' = no prompt)   ARGV[6] prompt content
  Returns { aborted (1 | 0), dropped count, wake of the prompt's turn or 0, the aborted turn's start (ms) or -1 },
  or { ERR.session_not_found }, { ERR.session_closed }.
]]
--@include errors
--@include session-inputs

if redis.call('EXISTS', metaKey) == 0 then return { ERR.session_not_found } end
if redis.call('HGET', metaKey, 'status') == 'closed' then return { ERR.session_closed } end
local sid, maxLen, channel = ARGV[1], ARGV[2], ARGV[3]
local dropped = dropInputs(sid, maxLen, channel, 'abort')
local aborted = 0
-- The loop to stop is the one holding the aborted turn's lease: the prompt's turn, begun below, may already run.
local lease = redis.call('HGET', metaKey, 'lease') or ''
local abortedStartedAt = endTurn(sid, maxLen, channel, 'cancelled', nowMs()) or -1
if abortedStartedAt >= 0 then
  aborted = 1
  appendEvent(sid, maxLen, channel, 'activity', cjson.encode({ state = 'idle', detail = '' }))
  redis.call('PUBLISH', ARGV[4], sid .. ' ' .. lease)
end
local wake = 0
if ARGV[5] ~= '' then
  local turn
  wake, turn = beginTurn(sid, maxLen, channel, ARGV[5], ARGV[6])
  redis.call('RPUSH', transcriptKey, cjson.encode({ role = 'user', content = ARGV[6] }))
  touchEverySessionKey(tonumber(redis.call('HGET', metaKey, 'ttl')))
end
return { aborted, dropped, wake, abortedStartedAt }
