--[[
  Appends entries to a workspace's approvals inbox log (what GET /api/approvals/stream serves): one per approval
  transition, written right after the owner's own script recorded it (the owner's log and the record are the truth;
  this log is in the workspace's slot, so it cannot be written in the same script on a Cluster).
  KEYS[1] inbox meta   KEYS[2] inbox events
  ARGV[1] max entries kept   ARGV[2] channel (the workspace's shard channel)
  ARGV[3] the log's id on that channel (`approvals:<workspace>`)   ARGV[4] JSON array of
  [type (approval_requested | approval_decided), the approval record's JSON text]
  Returns the last seq written.
]]
--@include event-log

local seq = 0
for _, e in ipairs(cjson.decode(ARGV[4])) do
  seq = appendToLog('approvals', KEYS[1], KEYS[2], ARGV[3], ARGV[1], ARGV[2], { 't', e[1], 'p', e[2] })
end
return seq
