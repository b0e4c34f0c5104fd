--[[
  Records the one decision of a pending approval: approved or denied by an operator, or expired by its timeout.
  A decided (or cancelled) approval is never decided again. An approval for the rest of the task also grants the
  same tool and arguments (KEYS[5]), so later calls like it do not ask.
  KEYS[1] meta   KEYS[2] events   KEYS[3] roster   KEYS[4] approvals hash   KEYS[5] grants set
  ARGV[1] taskId   ARGV[2] approvalId   ARGV[3] status: approved | denied | expired   ARGV[4] reason
  ARGV[5] decided_by (a key's name)   ARGV[6] now ms   ARGV[7] max events   ARGV[8] channel
  ARGV[9] modifier: the amended arguments' JSON text, or ''   ARGV[10] scope: once | task
  ARGV[11] the grant (approvalGrant of tool and arguments) when the scope is task, else ''
  ARGV[12] retention seconds (the grants set's expiry)
  Returns { code, record JSON, pending approvals left for the same worker }:
     1 decided now   ERR.approval_not_found   ERR.approval_decided (the record shows how)
]]
--@include errors
--@include task-log

local raw = redis.call('HGET', KEYS[4], ARGV[2])
if not raw then return { ERR.approval_not_found } end
local a = cjson.decode(raw)
if a.status ~= 'pending' then return { ERR.approval_decided, raw } end
a.status, a.decision_reason, a.decided_by, a.decided_at = ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
if ARGV[9] ~= '' then a.modifier = ARGV[9] end
a.scope = ARGV[10]
local encoded = cjson.encode(a)
redis.call('HSET', KEYS[4], ARGV[2], encoded)
if ARGV[11] ~= '' then
  redis.call('SADD', KEYS[5], ARGV[11])
  redis.call('EXPIRE', KEYS[5], tonumber(ARGV[12]))
end
local w = loadWorker(a.worker_id)
local resolved = { approval_id = a.approval_id, approved = (a.status == 'approved'), status = a.status, reason = ARGV[4],
  decided_by = ARGV[5], scope = ARGV[10] }
if ARGV[9] ~= '' then resolved.modifier = ARGV[9] end
appendEvent(ARGV[1], ARGV[7], ARGV[8], 'worker_approval_resolved', a.worker_id, w and w.attempt or 0, cjson.encode(resolved))
local left = 0
local all = redis.call('HVALS', KEYS[4])
for _, r in ipairs(all) do
  local other = cjson.decode(r)
  if other.worker_id == a.worker_id and other.status == 'pending' then left = left + 1 end
end
return { 1, encoded, left }
