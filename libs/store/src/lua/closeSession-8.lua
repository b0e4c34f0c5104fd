--[[
  Closes a session: every queued steer and follow-up is dropped (input_dropped, reason `session_closed`: never
  silently lost), a turn in progress ends (cancelled), session_closed is the log's last event, running loops are
  told on the cancel channel, and every key expires after the retention period.
  KEYS[1] meta   KEYS[2] events   KEYS[3] transcript   KEYS[4] calls   KEYS[5] steer list   KEYS[6] follow-up list
  KEYS[7] approvals (earlier turns' records)   KEYS[8] grants
  ARGV[1] sessionId   ARGV[2] reason   ARGV[3] retention seconds   ARGV[4] max events   ARGV[5] appended channel
  ARGV[6] cancel channel
  Returns { 1, the ended turn's start (ms) or -1 when no turn was in progress } closed now, { 2 } already closed,
  { ERR.session_not_found }.
]]
--@include errors
--@include session-inputs

if redis.call('EXISTS', metaKey) == 0 then return { ERR.session_not_found } end
if redis.call('HGET', metaKey, 'status') == 'closed' then return { 2 } end
local now = nowMs()
dropInputs(ARGV[1], ARGV[4], ARGV[5], 'session_closed')
local turnStartedAt = endTurn(ARGV[1], ARGV[4], ARGV[5], 'cancelled', now) or -1
redis.call('HSET', metaKey, 'status', 'closed', 'lease', '', 'closed_reason', ARGV[2], 'closed_at', now, 'updated_at', now)
appendEvent(ARGV[1], ARGV[4], ARGV[5], 'session_closed', cjson.encode({ reason = ARGV[2] }))
touchEverySessionKey(tonumber(ARGV[3]))
redis.call('PUBLISH', ARGV[6], ARGV[1])
return { 1, turnStartedAt }
