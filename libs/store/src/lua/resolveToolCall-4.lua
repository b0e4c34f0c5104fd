--[[
  Settles a client tool call: with the client's ToolResult, or with a tool error when its deadline passed. When
  it was the last call the parked turn waited for, the turn is woken: status `running`, `wake` + 1, and the
  caller enqueues the continuation job named by that wake.
  KEYS[1] meta   KEYS[2] events   KEYS[3] transcript   KEYS[4] calls
  ARGV[1] sessionId   ARGV[2] tool_call_id   ARGV[3] outcome JSON { success, result, exit_code?, truncated,
  duration_ms?, timed_out? }   ARGV[4] max events   ARGV[5] channel
  Returns the wake to enqueue (> 0), 0 when the turn needs no continuation yet, or ERR.session_not_found,
  ERR.session_closed, ERR.tool_call_not_found, ERR.tool_call_finished, ERR.tool_call_not_requested (a call
  still waiting for its approval, or a builtin: no tool_request was sent, so no result is the client's to give).
]]
--@include errors
--@include session-log

if redis.call('EXISTS', metaKey) == 0 then return ERR.session_not_found end
if redis.call('HGET', metaKey, 'status') == 'closed' then return ERR.session_closed end
local raw = redis.call('HGET', callsKey, ARGV[2])
if not raw then return ERR.tool_call_not_found end
local call = cjson.decode(raw)
if call.status ~= 'pending' then return ERR.tool_call_finished end
if call.builtin or (call.approval and call.approval.status ~= 'approved') then return ERR.tool_call_not_requested end
local outcome = cjson.decode(ARGV[3])
call.status, call.success, call.result = 'done', outcome.success, outcome.result
redis.call('HSET', callsKey, call.tool_call_id, cjson.encode(call))
outcome.tool_call_id, outcome.tool_name = call.tool_call_id, call.tool_name
appendEvent(ARGV[1], ARGV[4], ARGV[5], 'tool_result', cjson.encode(outcome))
if redis.call('HGET', metaKey, 'status') ~= 'waiting_tool' or #pendingCalls() > 0 then return 0 end
redis.call('HSET', metaKey, 'status', 'running', 'updated_at', nowMs())
return redis.call('HINCRBY', metaKey, 'wake', 1)
