--[[
  Parks a running turn that waits for client tool results: the turn lets go of its lease (its job ends and frees
  the worker slot) and the session waits in `waiting_tool`. If every result has already arrived, nothing changes
  and the caller carries on.
  KEYS[1] meta   KEYS[2] events   KEYS[3] transcript   KEYS[4] calls
  ARGV[1] lease
  Returns 1 parked, 0 nothing to wait for, ERR.session_not_found, ERR.lease_lost.
]]
--@include errors
--@include session-log

if redis.call('EXISTS', metaKey) == 0 then return ERR.session_not_found end
local m = redis.call('HMGET', metaKey, 'status', 'lease')
if m[1] ~= 'running' or m[2] ~= ARGV[1] then return ERR.lease_lost end
if #pendingCalls() == 0 then return 0 end
redis.call('HSET', metaKey, 'status', 'waiting_tool', 'lease', '', 'updated_at', nowMs())
return 1
