--[[
  The last step of a turn, fenced by the attempt's lease. A turn that ended normally (`end_turn`) while steering
  waits is not over: the steers are delivered and the turn goes on (returns 2). Otherwise the turn ends
  (turn_complete, activity idle) and queued inputs start the next turn at once: leftover steers and follow-ups by
  the follow-up mode (one, or all batched into one turn), so none is left behind an idle session.
  KEYS[1] meta   KEYS[2] events   KEYS[3] transcript   KEYS[4] calls   KEYS[5] steer list   KEYS[6] follow-up list
  KEYS[7] approvals (earlier turns' records)   KEYS[8] grants
  ARGV[1] sessionId   ARGV[2] lease   ARGV[3] transcript entries, JSON array of message JSON strings
  ARGV[4] meta fields, JSON object of strings   ARGV[5] events before the end, JSON array of { t, p }
  ARGV[6] stop reason   ARGV[7] max events   ARGV[8] appended channel
  Returns { 2, 0 } the turn goes on with steering, { 1, wake } ended and the next turn started, { 0, 0 } ended;
  { ERR.session_not_found }, { ERR.lease_lost }.
]]
--@include errors
--@include session-inputs

if redis.call('EXISTS', metaKey) == 0 then return { ERR.session_not_found } end
local m = redis.call('HMGET', metaKey, 'status', 'lease', 'turn')
if m[1] ~= 'running' or m[2] ~= ARGV[2] then return { ERR.lease_lost } end
local sid, maxLen, channel = ARGV[1], ARGV[7], ARGV[8]
for _, entry in ipairs(cjson.decode(ARGV[3])) do redis.call('RPUSH', transcriptKey, entry) end
local fields = cjson.decode(ARGV[4])
fields.updated_at = nowMs()
for k, v in pairs(fields) do redis.call('HSET', metaKey, k, v) end
for _, e in ipairs(cjson.decode(ARGV[5])) do appendEvent(sid, maxLen, channel, e.t, e.p) end
if ARGV[6] == 'end_turn' and redis.call('LLEN', steerKey) > 0 then
  deliverInputs(sid, maxLen, channel, 'steer', takeInputs(steerKey, inputMode('steering_mode')), tonumber(m[3]))
  return { 2, 0 }
end
endTurn(sid, maxLen, channel, ARGV[6], nowMs())
appendEvent(sid, maxLen, channel, 'activity', cjson.encode({ state = 'idle', detail = '' }))
local wake = continueWithQueued(sid, maxLen, channel)
return { wake > 0 and 1 or 0, wake }
