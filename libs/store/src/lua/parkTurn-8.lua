--[[
  Parks a running turn that waits for client tool results or approvals: the turn lets go of its lease (its job
  ends and frees the worker slot) and the session waits in `waiting_tool`. If every result has already arrived,
  nothing changes and the caller carries on. A parked turn goes on at the latest at its last deadline (an
  approval's timeout, plus the client call's own once approved; a client call's), so every key of the session
  is kept until `ttl` after that deadline, as a turn's start keeps them `ttl` from then: an approval may wait
  up to 7 days, longer than a short CADRE_SESSION_IDLE_TTL_SEC. Keys never expire sooner than they would have.
  KEYS[1] meta   KEYS[2] events   KEYS[3] transcript   KEYS[4] calls   KEYS[5] steer list   KEYS[6] follow-up list
  KEYS[7] approvals (earlier turns' records)   KEYS[8] grants
  ARGV[1] lease
  The meta hash's `parked_at` (ms) is when it parked: the continuation's claim reads it (park duration).
  Returns keepUntil (ms, > 1) parked: the parked index's score (cadre_sessions_parked counts the turn until then);
  0 nothing to wait for, ERR.session_not_found, ERR.lease_lost.
]]
--@include errors
--@include session-inputs

if redis.call('EXISTS', metaKey) == 0 then return ERR.session_not_found end
local m = redis.call('HMGET', metaKey, 'status', 'lease', 'ttl')
if m[1] ~= 'running' or m[2] ~= ARGV[1] then return ERR.lease_lost end
local pending = pendingCalls()
if #pending == 0 then return 0 end
local now = nowMs()
redis.call('HSET', metaKey, 'status', 'waiting_tool', 'lease', '', 'updated_at', now, 'parked_at', now)
local resumeBy = now
for _, call in ipairs(pending) do
  local by = tonumber(call.deadline_ms) or 0
  if call.approval and call.approval.status == 'pending' then
    by = call.approval.expires_at + (call.builtin and 0 or (tonumber(call.timeout_ms) or 0))
  end
  if by > resumeBy then resumeBy = by end
end
local keepUntil = resumeBy + tonumber(m[3]) * 1000
keepEverySessionKeyUntil(keepUntil)
return keepUntil
