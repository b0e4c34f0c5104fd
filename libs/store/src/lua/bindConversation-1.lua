--[[
  Binds a client's conversation reference (WindieOS `conversation_ref`) to a session of the workspace: the first
  binding wins unless `replace` (rehydrate-conversation in replace mode), so two sockets racing on a new ref share
  one session. Values are `<owner> <sessionId>`, the owner being the authenticated key that bound it: a replace
  by another owner changes nothing (the caller sees the other owner in the reply and refuses).
  KEYS[1] the workspace's conversations hash (ref → `<owner> <sessionId>`)
  ARGV[1] conversation ref   ARGV[2] owner   ARGV[3] session id   ARGV[4] '1' replace, '0' only if unbound
  ARGV[5] ttl seconds
  Returns the value the ref is bound to afterwards.
]]
local current = redis.call('HGET', KEYS[1], ARGV[1])
local owned = current and string.sub(current, 1, #ARGV[2] + 1) == ARGV[2] .. ' '
if not current or (ARGV[4] == '1' and owned) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ARGV[3])
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[5]))
return redis.call('HGET', KEYS[1], ARGV[1])
