--[[
  Creates a session: its meta hash, its seed transcript (history, project context) and the first event
  (session_started, seq 1).
  KEYS[1] meta   KEYS[2] events   KEYS[3] transcript   KEYS[4] calls
  ARGV[1] sessionId   ARGV[2] meta fields, JSON object of strings   ARGV[3] seed transcript, JSON array of message JSON strings
  ARGV[4] session_started payload JSON   ARGV[5] max events kept   ARGV[6] appended channel   ARGV[7] ttl seconds
  Returns the creation time (ms), or 0 when the session already existed (nothing written).
]]
--@include session-log

if redis.call('EXISTS', metaKey) == 1 then return 0 end
local now = nowMs()
for k, v in pairs(cjson.decode(ARGV[2])) do redis.call('HSET', metaKey, k, v) end
redis.call('HSET', metaKey, 'status', 'idle', 'seq', 0, 'wake', 0, 'turn', 0, 'lease', '', 'attempt', 0,
  'created_at', now, 'updated_at', now, 'ttl', ARGV[7])
-- Messages arrive as JSON text and are stored as is (cjson would turn an empty array into {}).
for _, message in ipairs(cjson.decode(ARGV[3])) do redis.call('RPUSH', transcriptKey, message) end
appendEvent(ARGV[1], ARGV[5], ARGV[6], 'session_started', ARGV[4])
touchSession(tonumber(ARGV[7]))
return now
