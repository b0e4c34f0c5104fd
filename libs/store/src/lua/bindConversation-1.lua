--[[
  Binds a client's conversation reference (WindieOS `conversation_ref`) to a session of the workspace: the first
  binding wins unless `replace` (rehydrate-conversation in replace mode), so two sockets racing on a new ref share
  one session. Values are `<owner> <sessionId>`, the owner being the authenticated key that bound it: a replace
  by another owner changes nothing (the caller sees the other owner in the reply and refuses).
  A binding to a session found gone (expired) is replaced too, but only while it still names that session: two
  sockets racing to re-bind it share one new session, as on a new ref.
  KEYS[1] the workspace's conversations hash (ref → `<owner> <sessionId>`)
  ARGV[1] conversation ref   ARGV[2] owner   ARGV[3] session id   ARGV[4] '1' replace, '0' only if unbound
  ARGV[5] ttl seconds   ARGV[6] the gone session the ref may still name ('' none)
  Returns the value the ref is bound to afterwards.
]]
local current = redis.call('HGET', KEYS[1], ARGV[1])
local owned = current and string.sub(current, 1, #ARGV[2] + 1) == ARGV[2] .. ' '
local stale = owned and ARGV[6] ~= '' and current == ARGV[2] .. ' ' .. ARGV[6]
if not current or (ARGV[4] == '1' and owned) or stale then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ARGV[3])
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[5]))
return redis.call('HGET', KEYS[1], ARGV[1])
