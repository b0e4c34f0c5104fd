--[[
  Replaces a source's client tools (roz RegisterTools): every tool named "<source>__*" (or registered under the
  source) goes, the new list is added; an empty list unregisters the source. Without a source the tools are
  added, replacing tools of the same name, as roz does.
  KEYS[1] meta   KEYS[2] events   KEYS[3] transcript   KEYS[4] calls
  ARGV[1] sessionId   ARGV[2] source ('' = none)   ARGV[3] tools, JSON array of tool JSON strings (each with name, source)
  ARGV[4] system context ('' = unchanged)   ARGV[5] max tools   ARGV[6] max events   ARGV[7] channel
  Returns the number of client tools after the change, or ERR.session_not_found, ERR.session_closed,
  ERR.too_many_tools.
]]
--@include errors
--@include session-log

if redis.call('EXISTS', metaKey) == 0 then return ERR.session_not_found end
if redis.call('HGET', metaKey, 'status') == 'closed' then return ERR.session_closed end
local source = ARGV[2]
local prefix = source .. '__'
-- Meta `tools` is a JSON array of tool JSON strings: each tool is kept as the text it arrived as (decoding and
-- re-encoding would turn an empty array in a schema into {}).
local added, addedNames = cjson.decode(ARGV[3]), {}
for _, text in ipairs(added) do addedNames[cjson.decode(text).name] = true end
local kept = {}
for _, text in ipairs(cjson.decode(redis.call('HGET', metaKey, 'tools') or '[]')) do
  local tool = cjson.decode(text)
  local owned = addedNames[tool.name]
  if source ~= '' then owned = owned or tool.source == source or string.sub(tool.name, 1, #prefix) == prefix end
  if not owned then table.insert(kept, text) end
end
local names = {}
for _, text in ipairs(added) do
  table.insert(kept, text)
  table.insert(names, cjson.encode(cjson.decode(text).name))
end
if #kept > tonumber(ARGV[5]) then return ERR.too_many_tools end
redis.call('HSET', metaKey, 'tools', #kept == 0 and '[]' or cjson.encode(kept), 'updated_at', nowMs())
if ARGV[4] ~= '' then redis.call('HSET', metaKey, 'system_context', ARGV[4]) end
appendEvent(ARGV[1], ARGV[6], ARGV[7], 'tools_registered',
  '{"source":' .. cjson.encode(source) .. ',"tools":[' .. table.concat(names, ',') .. ']}')
return #kept
