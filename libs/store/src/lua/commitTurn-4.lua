--[[
  One step of a running turn, fenced by the attempt's lease: transcript messages (a model-turn boundary),
  client tool calls to wait for, meta fields (usage, status when the turn ends) and events, all at once, so a
  boundary and what the log says about it can never disagree.
  KEYS[1] meta   KEYS[2] events   KEYS[3] transcript   KEYS[4] calls
  ARGV[1] sessionId   ARGV[2] lease   ARGV[3] transcript entries, JSON array of message JSON strings
  ARGV[4] calls to record, JSON array of call objects (each with tool_call_id)
  ARGV[5] meta fields to set, JSON object of strings   ARGV[6] events, JSON array of { t = type, p = payload JSON }
  ARGV[7] max events   ARGV[8] channel
  Returns the last seq appended (0 when no events), or ERR.session_not_found, ERR.lease_lost.
]]
--@include errors
--@include session-log

if redis.call('EXISTS', metaKey) == 0 then return ERR.session_not_found end
local m = redis.call('HMGET', metaKey, 'status', 'lease')
if m[1] ~= 'running' or m[2] ~= ARGV[2] then return ERR.lease_lost end
for _, entry in ipairs(cjson.decode(ARGV[3])) do redis.call('RPUSH', transcriptKey, entry) end
local calls = cjson.decode(ARGV[4])
for _, call in ipairs(calls) do redis.call('HSET', callsKey, call.tool_call_id, cjson.encode(call)) end
if #calls > 0 then liveWithSession(callsKey) end
local fields = cjson.decode(ARGV[5])
fields.updated_at = nowMs()
for k, v in pairs(fields) do redis.call('HSET', metaKey, k, v) end
local seq = 0
for _, e in ipairs(cjson.decode(ARGV[6])) do
  seq = appendEvent(ARGV[1], ARGV[7], ARGV[8], e.t, e.p)
  -- A client call remembers the seq of its tool_request, so a client resuming after it is sent the request again.
  -- A call waiting for approval remembers its approval_requested the same way.
  if e.t == 'tool_request' or e.t == 'approval_requested' then
    local id = cjson.decode(e.p).tool_call_id
    local raw = redis.call('HGET', callsKey, id)
    if raw then
      local call = cjson.decode(raw)
      if e.t == 'tool_request' then call.request_seq = seq else call.approval.request_seq = seq end
      redis.call('HSET', callsKey, id, cjson.encode(call))
    end
  end
end
return seq
