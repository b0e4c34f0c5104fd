-- A workspace's approvals inbox (`--@include approval-inbox`), written after every approval transition
-- of its tasks, sessions and runs. `base` is `<prefix>:{w:<ws>}` (KeyBuilder.workspace): the log and the pending
-- index lie in the workspace's slot, beside its run keys.
--   <base>:approvals:meta|events   the inbox log (GET /api/approvals/stream)
--   <base>:approvals:pending:<kind>  zset: approval id -> its deadline (ms), kind task | session | run
-- The index is what `cadre_approvals_pending` counts at scrape time (ZCOUNT from now: an approval whose decision
-- never reached the inbox stops counting at its deadline) without reading a record.
--@include event-log

local INBOX_MAX = 10000
-- Index entries whose deadline is this far past are dropped when a request is written (no decision comes then).
local PENDING_STALE_MS = 86400000

-- An approval id names its owner: `s.<session>.…`, `r.<run>.…`, or `<task>.…` (approval-store.ts).
local function approvalKind(approvalId)
  local prefix = string.sub(approvalId, 1, 2)
  if prefix == 's.' then return 'session' end
  if prefix == 'r.' then return 'run' end
  return 'task'
end

-- The pending index the approval belongs in.
local function pendingKey(base, approvalId)
  return base .. ':approvals:pending:' .. approvalKind(approvalId)
end

-- Indexes a pending approval until its deadline (ms), and drops the entries long past theirs.
local function keepPending(pending, approvalId, deadline)
  redis.call('ZADD', pending, deadline, approvalId)
  redis.call('ZREMRANGEBYSCORE', pending, '-inf', nowMs() - PENDING_STALE_MS)
  -- The index dies with its last entry's use: an entry whose decision never came (its announcement lost, its
  -- session or task expired) would otherwise keep a workspace that asks no more in Redis for ever. NX gives the
  -- key its first expiry, GT only ever moves it later, so a later deadline is never cut short by an earlier one.
  redis.call('PEXPIREAT', pending, deadline + PENDING_STALE_MS, 'NX')
  redis.call('PEXPIREAT', pending, deadline + PENDING_STALE_MS, 'GT')
end

-- Appends one transition (approval_requested | approval_decided, the record's JSON) and keeps the pending index.
-- Returns the entry's seq and 1 when this decision took a pending approval out of the index (0: a repeated
-- announcement, or a request the inbox never heard of), so a decision is counted once.
local function appendInboxEntry(base, channel, eventType, encoded)
  local a = cjson.decode(encoded)
  local pending = pendingKey(base, a.approval_id)
  local decided = 0
  if eventType == 'approval_requested' then
    keepPending(pending, a.approval_id, tonumber(a.expires_at) or 0)
  else
    decided = redis.call('ZREM', pending, a.approval_id)
  end
  local seq = appendToLog('approvals', base .. ':approvals:meta', base .. ':approvals:events', 'approvals:' .. string.match(base, '{w:(.*)}$'),
    INBOX_MAX, channel, { 't', eventType, 'p', encoded })
  return seq, decided
end
