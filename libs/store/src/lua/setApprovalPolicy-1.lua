--[[
  Replaces a workspace's approval policy (validated by the caller), or removes it.
  KEYS[1] the workspace's approval-policy key
  ARGV[1] policy JSON, or '' to remove it (back to the default: allow everything)
  Returns 1.
]]
if ARGV[1] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1
