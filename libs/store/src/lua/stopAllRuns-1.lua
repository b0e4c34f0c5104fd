--[[
  Stops every active run of one workspace (the emergency stop); each run-control event says `bulk: true`, as the
  original's. Repeating it is harmless.
  KEYS[1] <base>:workers
  ARGV[1] requested by   ARGV[2] command id prefix   ARGV[3] max events   ARGV[4] channel
  ARGV[5] retention seconds
  Returns { the ids of the runs stopped, the approvals their stops cancelled (records' JSON) }.
]]
--@include run-log

local now = nowMs()
local stopped = {}
local ids = redis.call('SMEMBERS', activeKey)
table.sort(ids)
for i, runId in ipairs(ids) do
  local run = loadRun(runId)
  if run and not RUN_TERMINAL[run.status] then
    stopRun(run, ARGV[2] .. '-' .. i, ARGV[1], now, ARGV[3], ARGV[4], tonumber(ARGV[5]), true)
    table.insert(stopped, runId)
  else
    redis.call('SREM', activeKey, runId)
  end
end
return { stopped, cancelledApprovals }
