--[[
  Decides the approval a call of the current turn waits for, once: approved, denied, or expired (its deadline
  job). Approved: a builtin call becomes `approved` (the worker runs it when the turn goes on); a client call
  becomes a plain client call, its tool_request is appended now and its own deadline starts. Denied or expired:
  the call is settled with a tool error the model sees. When that was the last call the parked turn waited for,
  the turn is woken (status `running`, `wake` + 1) and the caller enqueues the continuation. An approval for the
  rest of the session also grants the same tool and arguments (KEYS[5]), so later calls like it do not ask; the
  grants set expires with the session's other keys (liveWithSession), never after them.
  KEYS[1] meta   KEYS[2] events   KEYS[3] transcript   KEYS[4] calls   KEYS[5] grants set
  ARGV[1] sessionId   ARGV[2] approval_id, or the call's tool_call_id   ARGV[3] approved | denied | expired
  ARGV[4] reason   ARGV[5] decided_by (a key's name)   ARGV[6] max events   ARGV[7] channel
  ARGV[8] scope: once | session   ARGV[9] the grant (approvalGrant of tool and arguments) for scope session, else ''
  ARGV[10] modifier (approve only): the amended arguments' JSON text (checked by the caller), or ''. The call
  runs with it: a builtin's worker reads it from the call, a client's tool_request carries it as `parameters`.
  Returns { wake to enqueue (> 0) or 0, the call JSON }, or { ERR.session_not_found }, { ERR.session_closed },
  { ERR.approval_not_found }, { ERR.approval_decided, call JSON }.
]]
--@include errors
--@include session-log

if redis.call('EXISTS', metaKey) == 0 then return { ERR.session_not_found } end
if redis.call('HGET', metaKey, 'status') == 'closed' then return { ERR.session_closed } end
local raw = redis.call('HGET', callsKey, ARGV[2])
if not raw then
  local flat = redis.call('HGETALL', callsKey)
  for i = 2, #flat, 2 do
    local c = cjson.decode(flat[i])
    if c.approval and c.approval.approval_id == ARGV[2] then raw = flat[i] break end
  end
end
if not raw then return { ERR.approval_not_found } end
local call = cjson.decode(raw)
if not call.approval then return { ERR.approval_not_found } end
if call.approval.status ~= 'pending' then return { ERR.approval_decided, raw } end
local now = nowMs()
local approved = ARGV[3] == 'approved'
call.approval.status, call.approval.decided_at = ARGV[3], now
call.approval.decided_by, call.approval.decision_reason = ARGV[5], ARGV[4]
call.approval.scope = ARGV[8]
local modifier = approved and ARGV[10] or ''
if modifier ~= '' then
  call.approval.modifier = modifier
  if call.request_payload then
    -- Spliced as text, so the arguments reach the client exactly as given (a cjson round trip turns [] into {}).
    local req = cjson.decode(call.request_payload)
    call.request_payload = '{"tool_call_id":' .. cjson.encode(req.tool_call_id) .. ',"tool_name":' .. cjson.encode(req.tool_name)
      .. ',"parameters":' .. modifier .. ',"timeout_ms":' .. cjson.encode(req.timeout_ms) .. '}'
  end
end
if approved and ARGV[9] ~= '' then
  redis.call('SADD', KEYS[5], ARGV[9])
  liveWithSession(KEYS[5])
end
local maxLen, channel = ARGV[6], ARGV[7]
local resolved = {
  approval_id = call.approval.approval_id, tool_call_id = call.tool_call_id, tool_name = call.tool_name,
  approved = approved, status = ARGV[3], reason = ARGV[4], decided_by = ARGV[5], scope = ARGV[8],
}
if modifier ~= '' then resolved.modifier = modifier end
appendEvent(ARGV[1], maxLen, channel, 'approval_resolved', cjson.encode(resolved))
if approved and call.builtin then
  call.status = 'approved'
  redis.call('HSET', callsKey, call.tool_call_id, cjson.encode(call))
elseif approved then
  call.deadline_ms = now + call.timeout_ms
  call.request_seq = appendEvent(ARGV[1], maxLen, channel, 'tool_request', call.request_payload)
  redis.call('HSET', callsKey, call.tool_call_id, cjson.encode(call))
else
  local text = ARGV[3] == 'expired' and 'approval timed out' or ('denied: ' .. ARGV[4])
  call.status, call.success, call.result = 'done', false, text
  redis.call('HSET', callsKey, call.tool_call_id, cjson.encode(call))
  appendEvent(ARGV[1], maxLen, channel, 'tool_result', cjson.encode({
    tool_call_id = call.tool_call_id, tool_name = call.tool_name, success = false, result = text,
  }))
end
local encoded = cjson.encode(call)
if redis.call('HGET', metaKey, 'status') ~= 'waiting_tool' or #pendingCalls() > 0 then return { 0, encoded } end
redis.call('HSET', metaKey, 'status', 'running', 'updated_at', now)
return { redis.call('HINCRBY', metaKey, 'wake', 1), encoded }
