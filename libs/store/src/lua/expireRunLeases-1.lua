--[[
  The sweeper's pass over one workspace: expire the leases of runs whose worker stopped heartbeating.
  KEYS[1] <base>:workers
  ARGV[1] base   ARGV[2] max attempts   ARGV[3] max events   ARGV[4] channel   ARGV[5] retention seconds
  Returns { leases expired, runs requeued }.
]]
--@include run-log

local lost, requeued = expireLeases(nowMs(), tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5]))
return { lost, requeued }
