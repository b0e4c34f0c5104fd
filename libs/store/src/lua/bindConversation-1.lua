--[[
  Binds a client's conversation reference (WindieOS `conversation_ref`) to a session: the first binding wins
  unless `replace` (rehydrate-conversation in replace mode), so two sockets racing on a new ref share one session.
  KEYS[1] the owner's conversations hash (ref → session id)
  ARGV[1] conversation ref   ARGV[2] session id   ARGV[3] '1' replace, '0' only if unbound   ARGV[4] ttl seconds
  Returns the session id the ref is bound to afterwards.
]]
if ARGV[3] == '1' or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
return redis.call('HGET', KEYS[1], ARGV[1])
