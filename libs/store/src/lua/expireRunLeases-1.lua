--[[
  The sweeper's pass over one workspace: expire the leases of runs whose worker stopped heartbeating.
  KEYS[1] <base>:workers
  ARGV[1] max attempts   ARGV[2] max events   ARGV[3] channel   ARGV[4] retention seconds
  Returns { leases expired, runs requeued, the approvals of the lost attempts it cancelled (records' JSON) }.
]]
--@include run-log

local lost, requeued = expireLeases(nowMs(), tonumber(ARGV[1]), ARGV[2], ARGV[3], tonumber(ARGV[4]))
return { lost, requeued, cancelledApprovals }
