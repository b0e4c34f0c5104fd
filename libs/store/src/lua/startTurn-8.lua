--[[
  Starts a turn with a user message: the message joins the transcript, the session becomes `running` and
  `wake` names the job that runs the turn. Refused while another turn is in progress (roz: turn_in_progress).
  Every key of the session (queued inputs and earlier turns' records too) then expires the idle TTL from now.
  KEYS[1] meta   KEYS[2] events   KEYS[3] transcript   KEYS[4] calls   KEYS[5] steer list   KEYS[6] follow-up list
  KEYS[7] approvals (earlier turns' records)   KEYS[8] grants
  ARGV[1] sessionId   ARGV[2] message_id   ARGV[3] user message JSON (transcript entry; content is text, or
  content parts: the text part, then image_url parts, which the user_message event counts as `images`)
  ARGV[4] turn tool snapshot JSON ('' = the session's tools)   ARGV[5] turn system context ('' = none)
  ARGV[6] max events   ARGV[7] channel
  Returns the new wake (> 0), or ERR.session_not_found, ERR.session_closed, ERR.turn_in_progress.
]]
--@include errors
--@include session-inputs

if redis.call('EXISTS', metaKey) == 0 then return ERR.session_not_found end
local status = redis.call('HGET', metaKey, 'status')
if status == 'closed' then return ERR.session_closed end
if status ~= 'idle' then return ERR.turn_in_progress end
local now = nowMs()
local wake = redis.call('HINCRBY', metaKey, 'wake', 1)
local turn = redis.call('HINCRBY', metaKey, 'turn', 1)
redis.call('HSET', metaKey, 'status', 'running', 'message_id', ARGV[2], 'lease', '', 'attempt', 0,
  'turn_usage', '{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}', 'turn_tools', ARGV[4],
  'turn_system_context', ARGV[5], 'turn_started_len', redis.call('LLEN', transcriptKey), 'turn_started_at', now, 'updated_at', now)
redis.call('RPUSH', transcriptKey, ARGV[3])
clearCalls(approvalsKey)
local content = cjson.decode(ARGV[3]).content
local event = { message_id = ARGV[2], content = content, turn = turn }
if type(content) == 'table' then
  event.content, event.images = '', 0
  for _, part in ipairs(content) do
    if part.type == 'text' then event.content = part.text else event.images = event.images + 1 end
  end
end
appendEvent(ARGV[1], ARGV[6], ARGV[7], 'user_message', cjson.encode(event))
touchEverySessionKey(tonumber(redis.call('HGET', metaKey, 'ttl')))
return wake
