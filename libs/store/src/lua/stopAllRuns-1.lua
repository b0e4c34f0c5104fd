--[[
  Stops every active run of one workspace (the emergency stop); each run-control event says `bulk: true`, as the
  original's. Repeating it is harmless.
  KEYS[1] <base>:workers
  ARGV[1] base   ARGV[2] requested by   ARGV[3] command id prefix   ARGV[4] max events   ARGV[5] channel
  ARGV[6] retention seconds
  Returns the ids of the runs stopped.
]]
--@include run-log

local now = nowMs()
local stopped = {}
local ids = redis.call('SMEMBERS', activeKey)
table.sort(ids)
for i, runId in ipairs(ids) do
  local run = loadRun(runId)
  if run and not RUN_TERMINAL[run.status] then
    stopRun(run, ARGV[3] .. '-' .. i, ARGV[2], now, ARGV[4], ARGV[5], tonumber(ARGV[6]), true)
    table.insert(stopped, runId)
  else
    redis.call('SREM', activeKey, runId)
  end
end
return stopped
