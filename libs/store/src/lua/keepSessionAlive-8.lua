--[[
  Keeps the session of a running turn alive: every key of it expires the idle TTL from now, unless it already
  expires later (a park's deadline, parkTurn-8.lua: GT never shortens an expiry). A turn's start sets the keys' expiry
  and nothing else moves it while the turn runs, so a turn (or one step of it) longer than the idle TTL would lose
  its session mid-turn; the turn runner's timer calls this every third of the idle TTL while a job run of the turn
  lasts (libs/session/src/keep-alive.ts).
  Fenced by the attempt's lease: a deleted session is never brought back (no meta hash: nothing is written), and a
  closed one keeps its retention (its turn ended). PEXPIREAT on a key that does not exist does nothing.
  KEYS[1] meta   KEYS[2] events   KEYS[3] transcript   KEYS[4] calls   KEYS[5] steer list   KEYS[6] follow-up list
  KEYS[7] approvals (earlier turns' records)   KEYS[8] grants
  ARGV[1] lease
  The meta hash's `kept_at` (ms) is when it ran: the next keep, on any attempt, counts from it.
  Returns the meta hash's expiry (ms), or ERR.session_not_found, ERR.lease_lost.
]]
--@include errors
--@include session-inputs

if redis.call('EXISTS', metaKey) == 0 then return ERR.session_not_found end
local m = redis.call('HMGET', metaKey, 'status', 'lease', 'ttl')
if m[1] ~= 'running' or m[2] ~= ARGV[1] then return ERR.lease_lost end
local now = nowMs()
redis.call('HSET', metaKey, 'kept_at', now)
keepEverySessionKeyUntil(now + tonumber(m[3]) * 1000)
return redis.call('PEXPIRETIME', metaKey)
