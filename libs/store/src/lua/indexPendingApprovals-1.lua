--[[
  Puts a session's approvals in its workspace's pending index before the session's own script asks them (add), or
  takes them out again once that script has refused them (remove). The index lies in the workspace's slot and the
  session in its own, so on a Cluster no one script writes both; written first, the index names every approval a
  session has pending, whatever becomes of the process after the session's script (appendInbox keeps it from then
  on, as the transitions are announced). An entry the script never asked (the process died between the two) is a
  candidate only: the inbox listing reads each session's records, the truth, and the entry drops off at its deadline.
  KEYS[1] the workspace's inbox meta (its slot: the index's keys derive from it, as in approval-inbox.lua)
  ARGV[1] add | remove   ARGV[2] JSON array of [approval_id, deadline (ms)]
]]
--@include approval-inbox

local base = string.sub(KEYS[1], 1, -(#':approvals:meta' + 1))
for _, a in ipairs(cjson.decode(ARGV[2])) do
  local pending = pendingKey(base, a[1])
  if ARGV[1] == 'add' then keepPending(pending, a[1], tonumber(a[2])) else redis.call('ZREM', pending, a[1]) end
end
return 0
