--[[
  A model-turn boundary of a running turn, fenced by the attempt's lease: queued steering messages (one or all,
  by the steering mode) join the transcript as user messages, after `messages` (what the model had said when a
  steer cut its stream short) and the events that go with them.
  KEYS[1] meta   KEYS[2] events   KEYS[3] transcript   KEYS[4] calls   KEYS[5] steer list   KEYS[6] follow-up list
  KEYS[7] approvals (earlier turns' records)   KEYS[8] grants
  ARGV[1] sessionId   ARGV[2] lease   ARGV[3] transcript entries before the steers, JSON array of message JSON strings
  ARGV[4] events before them, JSON array of { t, p }   ARGV[5] max events   ARGV[6] appended channel
  Returns how many steering messages were delivered, or ERR.session_not_found, ERR.lease_lost.
]]
--@include errors
--@include session-inputs

if redis.call('EXISTS', metaKey) == 0 then return ERR.session_not_found end
local m = redis.call('HMGET', metaKey, 'status', 'lease', 'turn')
if m[1] ~= 'running' or m[2] ~= ARGV[2] then return ERR.lease_lost end
local steers = takeInputs(steerKey, inputMode('steering_mode'))
local before = cjson.decode(ARGV[3])
-- Nothing to deliver: the partial answer is not written either (the caller only passes one when a steer waits).
if #steers == 0 then return 0 end
for _, entry in ipairs(before) do redis.call('RPUSH', transcriptKey, entry) end
for _, e in ipairs(cjson.decode(ARGV[4])) do appendEvent(ARGV[1], ARGV[5], ARGV[6], e.t, e.p) end
deliverInputs(ARGV[1], ARGV[5], ARGV[6], 'steer', steers, tonumber(m[3]))
redis.call('HSET', metaKey, 'updated_at', nowMs())
return #steers
