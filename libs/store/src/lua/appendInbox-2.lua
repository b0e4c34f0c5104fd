--[[
  Appends entries to a workspace's approvals inbox log (what GET /api/approvals/stream serves): one per approval
  transition, written right after the owner's own script recorded it (the owner's log and the record are the truth;
  this log is in the workspace's slot, so it cannot be written in the same script on a Cluster). The pending index
  beside it follows (approval-inbox.lua derives its keys from KEYS[1], in the same slot).
  KEYS[1] inbox meta   KEYS[2] inbox events
  ARGV[1] channel (the workspace's shard channel)   ARGV[2] JSON array of
  [type (approval_requested | approval_decided), the approval record's JSON text]
  Returns { last seq written, ids of the approvals these decisions took out of the pending index (counted once) }.
]]
--@include approval-inbox

local base = string.sub(KEYS[1], 1, -(#':approvals:meta' + 1))
local seq, decided = 0, {}
for _, e in ipairs(cjson.decode(ARGV[2])) do
  local left
  seq, left = appendInboxEntry(base, ARGV[1], e[1], e[2])
  if left == 1 then table.insert(decided, cjson.decode(e[2]).approval_id) end
end
return { seq, decided }
