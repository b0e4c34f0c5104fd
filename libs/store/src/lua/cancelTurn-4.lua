--[[
  Cancels the turn in progress: pending client calls are settled, the turn ends with turn_complete
  (stop_reason `cancelled`, or the given one), and running loops are told on the cancel channel. The lease is
  cleared, so a loop that misses the message is refused at its next write. With ARGV[6], an error event is
  appended first (a turn that lost its worker too often ends this way).
  KEYS[1] meta   KEYS[2] events   KEYS[3] transcript   KEYS[4] calls
  ARGV[1] sessionId   ARGV[2] stop reason   ARGV[3] max events   ARGV[4] appended channel   ARGV[5] cancel channel
  ARGV[6] session_error payload JSON or ''   ARGV[7] only if the turn is at this wake ('' = any)
  Returns { 1, the turn's start (ms) } cancelled, { 0 } no turn in progress, { ERR.session_not_found },
  { ERR.session_closed }.
]]
--@include errors
--@include session-log

if redis.call('EXISTS', metaKey) == 0 then return { ERR.session_not_found } end
local m = redis.call('HMGET', metaKey, 'status', 'wake')
if m[1] == 'closed' then return { ERR.session_closed } end
if m[1] ~= 'running' and m[1] ~= 'waiting_tool' then return { 0 } end
if ARGV[7] ~= '' and ARGV[7] ~= m[2] then return { 0 } end
if ARGV[6] ~= '' then appendEvent(ARGV[1], ARGV[3], ARGV[4], 'session_error', ARGV[6]) end
local startedAt = endTurn(ARGV[1], ARGV[3], ARGV[4], ARGV[2], nowMs())
redis.call('PUBLISH', ARGV[5], ARGV[1])
return { 1, startedAt }
