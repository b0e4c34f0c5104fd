-- Shared by every run script (`--@include run-log`). All of a workspace's run keys share the hash tag
-- `{w:<workspace>}` so a heartbeat (worker, queue, run, log, commands) is one script on one slot. Scripts get
-- KEYS[1] = `<base>:workers` (base = `<prefix>:{w:<ws>}`, KeyBuilder.workspace); every other key is derived from
-- that declared key, never from ARGV, so it carries the same hash tag and lies in the same slot. (Which runs a
-- heartbeat or a stop-all touches is only known inside the script, as BullMQ's job keys are: they cannot all be
-- listed in KEYS beforehand, so they are built from the declared key's base, as BullMQ builds its own.)
--@include event-log
--@include approval-inbox

local base, workersKey
local queueKey    -- list: run ids awaiting a worker, FIFO (requeued runs go first)
local activeKey   -- set: runs not yet stopped/completed/failed (the active-run cap)
local expiryKey   -- zset: bound run id -> lease expiry (ms)
-- also <base>:runs (zset: run id -> created ms, for listing) and <base>:leases (lease id counter)

-- The approvals this script cancelled (records as JSON, the script's reply carries them): the store reports
-- them as decisions (cadre_approval_decisions_total{outcome="cancelled"}), as it does the ones it decides itself.
local cancelledApprovals

local function enterRunLog(KEYS)
  base = string.sub(KEYS[1], 1, -(#':workers' + 1))
  workersKey, queueKey, activeKey, expiryKey = base .. ':workers', base .. ':queue', base .. ':active', base .. ':expiry'
  cancelledApprovals = {}
end
local function runMeta(runId) return base .. ':run:' .. runId .. ':meta' end
local function runEvents(runId) return base .. ':run:' .. runId .. ':events' end
local function commandsKey(workerId) return base .. ':cmds:' .. workerId end

local RUN_TERMINAL = { stopped = true, completed = true, failed = true }

-- Optional strings are stored as '' and shown as null, as the original API shows unset optional fields.
local function orNull(s)
  if s == nil or s == '' then return cjson.null end
  return s
end

-- The run view's `worker {...}`: the bound worker as of its latest heartbeat (stored on the run as JSON).
local function runWorkerView(w, now)
  return cjson.encode({ worker_id = w.worker_id, vm_id = orNull(w.vm_id), session_id = orNull(w.session_id),
    agent_id = orNull(w.agent_id), user_id = orNull(w.user_id), status = w.status, metadata = w.metadata or {},
    last_heartbeat_at = now })
end

local function appendRunEvent(runId, maxLen, channel, eventType, source, payload)
  return appendToLog('run', runMeta(runId), runEvents(runId), 'run:' .. runId, maxLen, channel,
    { 't', eventType, 's', source, 'p', payload })
end

local function loadRun(runId)
  local flat = redis.call('HGETALL', runMeta(runId))
  if #flat == 0 then return nil end
  local r = {}
  for i = 1, #flat, 2 do r[flat[i]] = flat[i + 1] end
  return r
end

local function loadWorker(workerId)
  local raw = redis.call('HGET', workersKey, workerId)
  if not raw then return nil end
  return cjson.decode(raw)
end

-- Ends a run (stopped | completed | failed): out of the queue, the cap and the lease table.
local function finishRun(runId, status, now, errorText, retentionSec)
  redis.call('HSET', runMeta(runId), 'status', status, 'finished_at', now, 'updated_at', now, 'error', errorText or '')
  redis.call('SREM', activeKey, runId)
  redis.call('LREM', queueKey, 0, runId)
  redis.call('ZREM', expiryKey, runId)
  redis.call('EXPIRE', runMeta(runId), retentionSec)
  redis.call('EXPIRE', runEvents(runId), retentionSec)
end

-- A run's tool-call approvals (hash approval_id -> record JSON) and the workspace's approvals inbox (the same
-- slot, so a run's approval and its inbox entry are written together; see approval-inbox.lua).
local function runApprovals(runId) return base .. ':run:' .. runId .. ':approvals' end

local function announceApproval(channel, eventType, encoded)
  appendInboxEntry(base, channel, eventType, encoded)
end

-- The resolution as the run's log and the inbox tell it (approval-resolved / approval_decided).
local function resolveRunApproval(runId, a, maxLen, channel)
  local encoded = cjson.encode(a)
  redis.call('HSET', runApprovals(runId), a.approval_id, encoded)
  local payload = { approval_id = a.approval_id, call_id = a.call_id, approved = (a.status == 'approved'), status = a.status,
    reason = a.decision_reason, decided_by = a.decided_by }
  if a.modifier then payload.modifier = a.modifier end
  appendRunEvent(runId, maxLen, channel, 'approval-resolved', 'backend', cjson.encode(payload))
  announceApproval(channel, 'approval_decided', encoded)
  return encoded
end

-- Cancels the run's pending approvals (the run was stopped, or its attempt lost its lease), oldest first.
local function cancelRunApprovals(runId, reason, now, maxLen, channel)
  local pending = {}
  for _, raw in ipairs(redis.call('HVALS', runApprovals(runId))) do
    local a = cjson.decode(raw)
    if a.status == 'pending' then table.insert(pending, a) end
  end
  table.sort(pending, function(x, y)
    if x.created_at ~= y.created_at then return x.created_at < y.created_at end
    if (x.order or 0) ~= (y.order or 0) then return (x.order or 0) < (y.order or 0) end
    return x.approval_id < y.approval_id
  end)
  for _, a in ipairs(pending) do
    a.status, a.decision_reason, a.decided_by, a.decided_at = 'cancelled', reason, '', now
    table.insert(cancelledApprovals, resolveRunApproval(runId, a, maxLen, channel))
  end
end

-- Queues a control command for the run's bound worker; it is delivered on the worker's next heartbeat. As in
-- the original, every command carries the run's control mode after the action.
local function queueCommand(run, commandId, action, controlMode, requestedBy, now)
  local cmd = { command_id = commandId, run_id = run.run_id, action = action, requested_by = orNull(requestedBy),
    control_mode = controlMode, created_at = now }
  redis.call('RPUSH', commandsKey(run.worker_id), cjson.encode(cmd))
end

-- The run-control event (source `api`, as the original): `command_id` is null when no worker holds the run.
local function appendControlEvent(runId, maxLen, channel, action, requestedBy, controlMode, status, commandId, bulk)
  local payload = { action = action, requested_by = orNull(requestedBy), control_mode = controlMode, status = status,
    command_id = orNull(commandId) }
  if bulk then payload.bulk = true end
  return appendRunEvent(runId, maxLen, channel, 'run-control', 'api', cjson.encode(payload))
end

-- Stops one active run: the log gets run-control, its worker (if any) a stop command. Returns the event's seq.
local function stopRun(run, commandId, requestedBy, now, maxLen, channel, retentionSec, bulk)
  local bound = run.worker_id ~= nil and run.worker_id ~= ''
  if bound then queueCommand(run, commandId, 'stop', run.control_mode, requestedBy, now) end
  finishRun(run.run_id, 'stopped', now, '', retentionSec)
  cancelRunApprovals(run.run_id, 'run stopped', now, maxLen, channel)
  return appendControlEvent(run.run_id, maxLen, channel, 'stop', requestedBy, run.control_mode, 'stopped',
    bound and commandId or '', bulk)
end

-- Runs whose bound worker stopped heartbeating lose their lease: back to the front of the queue as
-- awaiting_worker (run-worker-lost, run-requeued), or failed after `maxAttempts` losses.
-- Returns the number of leases that expired and how many of those runs went back to the queue (for metrics).
local function expireLeases(now, maxAttempts, maxLen, channel, retentionSec)
  local expired = redis.call('ZRANGEBYSCORE', expiryKey, '-inf', now)
  local lost, requeued = 0, 0
  for _, runId in ipairs(expired) do
    redis.call('ZREM', expiryKey, runId)
    local run = loadRun(runId)
    if run and not RUN_TERMINAL[run.status] and run.worker_id ~= '' then
      local attempts = tonumber(run.attempts or '0') + 1
      lost = lost + 1
      appendRunEvent(runId, maxLen, channel, 'run-worker-lost', 'backend',
        cjson.encode({ worker_id = run.worker_id, lease_id = run.lease_id, attempts = attempts }))
      -- The next attempt runs the agent from the start and asks again; the lost attempt's questions are void.
      cancelRunApprovals(runId, 'the run\'s worker was lost', now, maxLen, channel)
      local w = loadWorker(run.worker_id)
      if w and w.run_id == runId then
        w.run_id = nil
        redis.call('HSET', workersKey, w.worker_id, cjson.encode(w))
      end
      redis.call('HSET', runMeta(runId), 'attempts', attempts, 'worker_id', '', 'vm_id', '', 'lease_id', '', 'turn_ref', '',
        'dispatched_at', '', 'worker', '', 'updated_at', now)
      if attempts >= maxAttempts then
        finishRun(runId, 'failed', now, 'worker lost ' .. attempts .. ' times', retentionSec)
        appendRunEvent(runId, maxLen, channel, 'error', 'backend',
          cjson.encode({ reason = 'worker_lost', message = 'run failed: its worker was lost ' .. attempts .. ' times' }))
      elseif run.status == 'paused' then
        -- Paused runs stay paused; resume puts them back in the queue.
        redis.call('HSET', runMeta(runId), 'paused_from', 'awaiting_worker')
      else
        redis.call('HSET', runMeta(runId), 'status', 'awaiting_worker')
        redis.call('LPUSH', queueKey, runId)
        requeued = requeued + 1
        appendRunEvent(runId, maxLen, channel, 'run-requeued', 'backend', cjson.encode({ attempts = attempts }))
      end
    end
  end
  return lost, requeued
end
