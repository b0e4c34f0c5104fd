--[[
  Sets settings of an open session (values checked by the engine): the steering, follow-up and interrupt modes,
  or the model. They apply from the turn's next model call on.
  KEYS[1] meta
  ARGV[1] fields, JSON object of field → string value
  Returns 1, or ERR.session_not_found, ERR.session_closed.
]]
--@include errors
if redis.call('EXISTS', KEYS[1]) == 0 then return ERR.session_not_found end
if redis.call('HGET', KEYS[1], 'status') == 'closed' then return ERR.session_closed end
for k, v in pairs(cjson.decode(ARGV[1])) do redis.call('HSET', KEYS[1], k, v) end
return 1
