--[[
  A VM agent's tool calls that the workspace's policy asks about become pending approvals of the run: one record
  each (in the model's order), an approval-requested event in the run's log and an approval_requested entry in
  the workspace's approvals inbox. Only the run's holder (worker id and lease id) may ask, while the run is active.
  KEYS[1] <base>:workers
  ARGV[1] run id   ARGV[2] worker id   ARGV[3] lease id   ARGV[4] records JSON array   ARGV[5] max events
  ARGV[6] channel   ARGV[7] retention seconds
  Returns the last seq of the run's log; ERR.run_not_found, ERR.run_finished, ERR.worker_mismatch.
]]
--@include errors
--@include run-log

local runId, maxLen, channel = ARGV[1], ARGV[5], ARGV[6]
local run = loadRun(runId)
if not run then return ERR.run_not_found end
if RUN_TERMINAL[run.status] then return ERR.run_finished end
if run.worker_id ~= ARGV[2] or run.lease_id ~= ARGV[3] then return ERR.worker_mismatch end
local seq = 0
for _, a in ipairs(cjson.decode(ARGV[4])) do
  local encoded = cjson.encode(a)
  redis.call('HSET', runApprovals(runId), a.approval_id, encoded)
  seq = appendRunEvent(runId, maxLen, channel, 'approval-requested', 'backend', cjson.encode({
    approval_id = a.approval_id, call_id = a.call_id, tool_name = a.tool_name, arguments = a.arguments, reason = a.reason,
    timeout_secs = a.timeout_secs }))
  announceApproval(channel, 'approval_requested', encoded)
end
redis.call('EXPIRE', runApprovals(runId), tonumber(ARGV[7]))
return seq
