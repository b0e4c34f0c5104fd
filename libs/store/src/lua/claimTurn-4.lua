--[[
  A job process takes (or retakes) the running turn. The lease is the BullMQ lock token of the job run. If
  another lease still holds the turn, that attempt was lost (its worker died and its lock expired): the log
  records it (attempt_lost) and the turn goes on from its last persisted boundary. A turn handed back on a worker's
  shutdown has no lease (its attempt_lost was written with the hand-back). Writes from the old lease are
  refused by the fence in commitTurn and parkTurn.
  KEYS[1] meta   KEYS[2] events   KEYS[3] transcript   KEYS[4] calls
  ARGV[1] sessionId   ARGV[2] wake the job was enqueued for   ARGV[3] lease   ARGV[4] host id
  ARGV[5] max events   ARGV[6] channel
  Returns { code, attempt, parked_at (ms, when the turn last parked: parkTurn-8.lua; 0 never) }: 1 taken, 2 taken after a lost attempt (attempt_lost appended), 3 this lease already
  holds it; 0 nothing to run (the turn ended, was cancelled or moved on to a later wake), ERR.session_not_found.
]]
--@include errors
--@include session-log

if redis.call('EXISTS', metaKey) == 0 then return { ERR.session_not_found, 0 } end
local m = redis.call('HMGET', metaKey, 'status', 'wake', 'lease', 'attempt', 'host_id', 'parked_at')
if m[1] ~= 'running' or m[2] ~= ARGV[2] then return { 0, 0 } end
local lease = ARGV[3]
if m[3] == lease then return { 3, tonumber(m[4]), 0 } end
local code = 1
if m[3] ~= '' then
  appendEvent(ARGV[1], ARGV[5], ARGV[6], 'attempt_lost',
    cjson.encode({ attempt = tonumber(m[4]), host_id = m[5] or '', reason = 'worker_lost', message = 'the worker running this turn was lost; the turn resumes from its last boundary' }))
  code = 2
end
local attempt = redis.call('HINCRBY', metaKey, 'attempt', 1)
redis.call('HSET', metaKey, 'lease', lease, 'host_id', ARGV[4])
return { code, attempt, tonumber(m[6]) or 0 }
