--[[
  Records the one decision of a run's pending approval: approved or denied by an operator, or expired at its
  deadline (checked by whoever reads it after then). A decided or cancelled approval is never decided again.
  KEYS[1] <base>:workers
  ARGV[1] run id   ARGV[2] approval id   ARGV[3] status: approved | denied | expired   ARGV[4] reason
  ARGV[5] decided_by (a key's name)   ARGV[6] now ms   ARGV[7] max events   ARGV[8] channel
  ARGV[9] modifier: the amended arguments' JSON text, or ''
  Returns { code, record JSON }: 1 decided now, ERR.approval_not_found, ERR.approval_decided (the record shows how).
]]
--@include errors
--@include run-log

local runId = ARGV[1]
local raw = redis.call('HGET', runApprovals(runId), ARGV[2])
if not raw then return { ERR.approval_not_found } end
local a = cjson.decode(raw)
if a.status ~= 'pending' then return { ERR.approval_decided, raw } end
a.status, a.decision_reason, a.decided_by, a.decided_at = ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
if ARGV[9] ~= '' then a.modifier = ARGV[9] end
a.scope = 'once'
return { 1, resolveRunApproval(runId, a, ARGV[7], ARGV[8]) }
