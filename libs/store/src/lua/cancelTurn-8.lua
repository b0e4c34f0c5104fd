--[[
  Cancels the turn in progress: pending client calls are settled, the turn ends with turn_complete
  (stop_reason `cancelled`, or the given one), and the loop holding the turn's lease is told on the cancel channel
  (`<sessionId> <lease>`: only that turn's, not the next one's). The lease is
  cleared, so a loop that misses the message is refused at its next write. With ARGV[6], an error event is
  appended first (a turn that lost its worker too often ends this way). Nothing queued behind the turn is left
  stranded: a cancelled turn's steers were meant for it and are dropped (input_dropped, reason `cancelled`), and
  what is still queued starts the next turn at once, as when a turn ends in error (finishTurn-8.lua).
  KEYS[1] meta   KEYS[2] events   KEYS[3] transcript   KEYS[4] calls   KEYS[5] steer list   KEYS[6] follow-up list
  KEYS[7] approvals (earlier turns' records)   KEYS[8] grants
  ARGV[1] sessionId   ARGV[2] stop reason   ARGV[3] max events   ARGV[4] appended channel   ARGV[5] cancel channel
  ARGV[6] session_error payload JSON or ''   ARGV[7] only if the turn is at this wake ('' = any)
  Returns { 1, the turn's start (ms), the next turn's wake to enqueue or 0 } cancelled, { 0 } no turn in progress,
  { ERR.session_not_found }, { ERR.session_closed }.
]]
--@include errors
--@include session-inputs

if redis.call('EXISTS', metaKey) == 0 then return { ERR.session_not_found } end
local m = redis.call('HMGET', metaKey, 'status', 'wake')
if m[1] == 'closed' then return { ERR.session_closed } end
if m[1] ~= 'running' and m[1] ~= 'waiting_tool' then return { 0 } end
if ARGV[7] ~= '' and ARGV[7] ~= m[2] then return { 0 } end
local sid, maxLen, channel = ARGV[1], ARGV[3], ARGV[4]
-- The loop to stop is the one holding the ended turn's lease: the next turn, started below, may already run.
local lease = redis.call('HGET', metaKey, 'lease') or ''
if ARGV[6] ~= '' then appendEvent(sid, maxLen, channel, 'session_error', ARGV[6]) end
local startedAt = endTurn(sid, maxLen, channel, ARGV[2], nowMs())
redis.call('PUBLISH', ARGV[5], sid .. ' ' .. lease)
if ARGV[2] == 'cancelled' then dropQueued(sid, maxLen, channel, steerKey, 'steer', 'cancelled') end
return { 1, startedAt, continueWithQueued(sid, maxLen, channel) }
