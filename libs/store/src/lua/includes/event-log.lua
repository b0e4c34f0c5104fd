-- The append-only event log shared by task and run scripts (`--@include event-log`).
-- A log is a meta hash (field `seq` = last seq) and a stream whose entry ids are `<seq>-0`.

-- One TIME per script run: its events and fields share one timestamp (the run is atomic anyway), and a script
-- that appends several events does not ask the clock for each.
local scriptNowMs

-- The library's top level runs once, when Redis loads it: what a call must not inherit from the one before is
-- reset here, at every call's entry (scripts.ts calls each include's enter<Name> before the script).
local function enterEventLog()
  scriptNowMs = nil
end

local function nowMs()
  if not scriptNowMs then
    local t = redis.call('TIME')
    scriptNowMs = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return scriptNowMs
end

-- An append notification carries its entry (so a caught-up tail needs no read) up to this many bytes of fields;
-- a bigger entry (a long tool result) is announced by its header only and read from the log. Every gateway on the
-- channel gets the bytes, and a shard channel can be shared (a workspace's run logs): the cap bounds what a
-- listener that does not watch this log, or Redis's pub/sub output buffer, takes per append.
local NOTICE_ENTRY_MAX_BYTES = 16384

-- `<logId> <seq>`, then (when the entry fits the cap and no value holds a NUL) NUL and the entry's flat field list
-- as XRANGE returns it (`ts`, its value, then `fields`), joined by NULs: the reader splits it with no unescaping.
-- (Event payloads are JSON, which never holds a raw NUL: only another field could, and then the header goes alone.)
local function appendNotice(logId, seq, ts, fields)
  local header = logId .. ' ' .. seq
  local entry, size = { header, 'ts', ts }, 0
  for _, value in ipairs(fields) do
    size = size + string.len(value)
    if size > NOTICE_ENTRY_MAX_BYTES or string.find(value, '\0', 1, true) then return header end
    entry[#entry + 1] = value
  end
  return table.concat(entry, '\0')
end

-- Appends one entry: seq is assigned here, atomically with the append, so the log has no gaps; readers resume
-- with XRANGE (<after_seq>. `fields` is a flat list of field, value pairs (strings or integers); `ts` is added.
-- Watchers are told on `channel` (appendNotice: the entry itself, or its header): a shard channel in the log's own
-- slot (KeyBuilder.taskAppended & co.), so only the nodes and gateways that watch this log hear it, on Redis
-- Cluster as on one node.
-- `log` is the kind of log (task | run | session | approvals): the append is counted in `appendedEvents`, which
-- the script loader declares, resets at every call and returns with the script's reply (scripts.ts), so the
-- process that ran the script counts what it appended (cadre_events_appended_total).
local function appendToLog(log, metaKey, eventsKey, logId, maxLen, channel, fields)
  local seq = redis.call('HINCRBY', metaKey, 'seq', 1)
  -- One string for the stream and the notice, so both carry the same bytes.
  local ts = string.format('%d', nowMs())
  redis.call('XADD', eventsKey, 'MAXLEN', maxLen, seq .. '-0', 'ts', ts, unpack(fields))
  redis.call('SPUBLISH', channel, appendNotice(logId, seq, ts, fields))
  appendedEvents[log] = appendedEvents[log] + 1
  return seq
end
