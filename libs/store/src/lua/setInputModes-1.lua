--[[
  Sets a session's steering, follow-up and interrupt modes (values checked by the engine).
  KEYS[1] meta
  ARGV[1] modes, JSON object with any of steering_mode, follow_up_mode, interrupt_mode
  Returns 1, or -1 no such session, -2 session closed.
]]
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('HGET', KEYS[1], 'status') == 'closed' then return -2 end
for k, v in pairs(cjson.decode(ARGV[1])) do redis.call('HSET', KEYS[1], k, v) end
return 1
