--[[
  A steering or follow-up message. While a turn is in progress it is queued (input_queued) and, for a steer
  in interrupt mode `immediate` while the model runs, the running loop is told on the cancel channel
  (`steer:<sessionId>`) to cut its model stream short. On an idle session it starts a turn at once (with any
  inputs left over from a turn that ended early), delivered in that turn.
  KEYS[1] meta   KEYS[2] events   KEYS[3] transcript   KEYS[4] calls   KEYS[5] steer list   KEYS[6] follow-up list
  KEYS[7] approvals (earlier turns' records)   KEYS[8] grants
  ARGV[1] sessionId   ARGV[2] kind ('steer' | 'follow_up')   ARGV[3] entry JSON {input_id, content, queued_at}
  ARGV[4] max queued per list   ARGV[5] max events   ARGV[6] appended channel   ARGV[7] cancel channel
  Returns { 0, position } queued, { 1, wake } started a turn; { ERR.session_not_found }, { ERR.session_closed },
  { ERR.queue_full }.
]]
--@include errors
--@include session-inputs

if redis.call('EXISTS', metaKey) == 0 then return { ERR.session_not_found } end
local status = redis.call('HGET', metaKey, 'status')
if status == 'closed' then return { ERR.session_closed } end
local kind, entry = ARGV[2], cjson.decode(ARGV[3])
local key = kind == 'steer' and steerKey or followKey
if status == 'idle' then
  redis.call('RPUSH', key, ARGV[3])
  return { 1, continueWithQueued(ARGV[1], ARGV[5], ARGV[6]) }
end
if redis.call('LLEN', key) >= tonumber(ARGV[4]) then return { ERR.queue_full } end
local position = redis.call('RPUSH', key, ARGV[3])
liveWithSession(key)
appendEvent(ARGV[1], ARGV[5], ARGV[6], 'input_queued',
  cjson.encode({ input_id = entry.input_id, kind = kind, content = entry.content, position = position }))
local interrupt = redis.call('HGET', metaKey, 'interrupt_mode')
if kind == 'steer' and status == 'running' and interrupt ~= 'wait' then
  redis.call('PUBLISH', ARGV[7], 'steer:' .. ARGV[1])
end
return { 0, position }
