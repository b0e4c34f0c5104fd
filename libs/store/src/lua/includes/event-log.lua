-- The append-only event log shared by task and run scripts (inlined at `--@include event-log`).
-- A log is a meta hash (field `seq` = last seq) and a stream whose entry ids are `<seq>-0`.

-- One TIME per script run: its events and fields share one timestamp (the run is atomic anyway), and a script
-- that appends several events does not ask the clock for each.
local scriptNowMs
local function nowMs()
  if not scriptNowMs then
    local t = redis.call('TIME')
    scriptNowMs = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return scriptNowMs
end

-- Appends one entry: seq is assigned here, atomically with the append, so the log has no gaps; readers resume
-- with XRANGE (<after_seq>. `fields` is a flat list of field, value pairs; `ts` is added. Watchers are woken
-- with `<logId> <seq>` on `channel`: a shard channel in the log's own slot (KeyBuilder.taskAppended & co.), so
-- only the nodes and gateways that watch this log hear it, on Redis Cluster as on one node.
-- `log` is the kind of log (task | run | session | approvals): the append is counted in `appendedEvents`, which
-- the script loader declares around every script and returns with its reply (scripts.ts), so the process that
-- ran the script counts what it appended (cadre_events_appended_total).
local function appendToLog(log, metaKey, eventsKey, logId, maxLen, channel, fields)
  local seq = redis.call('HINCRBY', metaKey, 'seq', 1)
  redis.call('XADD', eventsKey, 'MAXLEN', maxLen, seq .. '-0', 'ts', nowMs(), unpack(fields))
  redis.call('SPUBLISH', channel, logId .. ' ' .. seq)
  appendedEvents[log] = appendedEvents[log] + 1
  return seq
end
