--[[
  Replaces the oldest `count` transcript messages (whole earlier turns) with one summary message, fenced by the
  attempt's lease and by the transcript's length (nothing may have joined it since the summary was made).
  KEYS[1] meta   KEYS[2] events   KEYS[3] transcript   KEYS[4] calls
  ARGV[1] sessionId   ARGV[2] lease   ARGV[3] expected transcript length   ARGV[4] count   ARGV[5] summary message JSON
  ARGV[6] context_compacted payload JSON   ARGV[7] max events   ARGV[8] channel
  Returns the seq of context_compacted, or ERR.session_not_found, ERR.lease_lost,
  ERR.transcript_changed.
]]
--@include errors
--@include session-log

if redis.call('EXISTS', metaKey) == 0 then return ERR.session_not_found end
local m = redis.call('HMGET', metaKey, 'status', 'lease', 'turn_started_len')
if m[1] ~= 'running' or m[2] ~= ARGV[2] then return ERR.lease_lost end
if redis.call('LLEN', transcriptKey) ~= tonumber(ARGV[3]) then return ERR.transcript_changed end
local count = tonumber(ARGV[4])
redis.call('LTRIM', transcriptKey, count, -1)
redis.call('LPUSH', transcriptKey, ARGV[5])
redis.call('HSET', metaKey, 'turn_started_len', tonumber(m[3]) - count + 1, 'updated_at', nowMs())
return appendEvent(ARGV[1], ARGV[7], ARGV[8], 'context_compacted', ARGV[6])
