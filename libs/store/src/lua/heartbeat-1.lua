--[[
  A worker's heartbeat, in one call: upsert the worker, renew the lease of the run it holds, expire the leases of
  workers that went quiet, assign at most one run (FIFO) when the worker is ready or running and holds none, and
  hand out its control commands.
  Commands: with ack mode (ARGV[4] is a JSON list, possibly empty) acked commands are dropped and the rest are
  redelivered until acked, so a lost response loses nothing; without it (ARGV[4] = '') each command is delivered
  once, as the original API did.
  A run assigned but not yet dispatched is sent again on every heartbeat, so a lost response cannot strand it; a
  new session_id for the same worker id, or an acking worker reporting `ready` while it holds a dispatched run,
  releases that run (it goes back to the queue as a lost attempt).
  KEYS[1] <base>:workers
  ARGV[1] worker JSON (worker_id, workspace_id, vm_id, user_id, session_id, agent_id, status,
  metadata; unset strings are '')
  ARGV[2] lease ttl ms   ARGV[3] max attempts   ARGV[4] acked command ids JSON or ''
  ARGV[5] max events   ARGV[6] appended channel   ARGV[7] retention seconds
  The run a worker holds shows it (`worker {...}`, `last_heartbeat_at`) as of this heartbeat.
  Returns JSON { worker, assigned_run (or absent), control_commands, lost, requeued, cancelled_approvals (or
  absent) } (lost/requeued: leases expired and runs put back in the queue by this call; cancelled_approvals: the
  lost attempts' approvals it cancelled, records' JSON; for metrics).
]]
--@include run-log

local incoming = cjson.decode(ARGV[1])
-- Decoded before the first write: a script that fails half-way keeps what it wrote.
local ackedIds = ARGV[4] ~= '' and cjson.decode(ARGV[4]) or {}
local ttl, maxAttempts, maxLen, channel, retention = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[5], ARGV[6], tonumber(ARGV[7])
local now = nowMs()
-- The same worker id in a new session (a restarted VM agent) no longer holds what the old session held: its lease
-- ends now, so the run goes back to the queue instead of waiting for a worker that forgot it.
-- Likewise a Cadre worker (one that acks, ARGV[4] ~= '') reporting `ready` while it holds a dispatched run has
-- dropped it (e.g. it gave up on a lost reply). Original workers (no acks) keep the original semantics.
local previous = loadWorker(incoming.worker_id)
if previous and previous.run_id then
  local newSession = previous.session_id and incoming.session_id and previous.session_id ~= ''
    and previous.session_id ~= incoming.session_id
  local dropped = false
  if ARGV[4] ~= '' and incoming.status == 'ready' then
    local status, pausedFrom = unpack(redis.call('HMGET', runMeta(previous.run_id), 'status', 'paused_from'))
    dropped = status == 'running' or (status == 'paused' and pausedFrom == 'running')
  end
  if (newSession or dropped) and redis.call('ZSCORE', expiryKey, previous.run_id) then
    redis.call('ZADD', expiryKey, 0, previous.run_id)
  end
end
local lost, requeued = expireLeases(now, maxAttempts, maxLen, channel, retention)

-- Only an expired lease rewrites a worker (its run_id): when none expired, the record read above is still current.
local w = (lost == 0 and previous) or loadWorker(incoming.worker_id) or {}
for k, v in pairs(incoming) do w[k] = v end
w.last_heartbeat_at = now

-- The run this worker holds, if it still holds one.
local held = nil
if w.run_id then
  local run = loadRun(w.run_id)
  if run and run.worker_id == w.worker_id and not RUN_TERMINAL[run.status] then
    held = run
    redis.call('ZADD', expiryKey, now + ttl, run.run_id)
    redis.call('HSET', runMeta(run.run_id), 'worker', runWorkerView(w, now), 'last_heartbeat_at', now)
  else
    w.run_id = nil
  end
end

local assigned = nil
if held and held.status == 'queued' then
  assigned = held
elseif not held and (w.status == 'ready' or w.status == 'running') then
  while true do
    local runId = redis.call('LPOP', queueKey)
    if not runId then break end
    local run = loadRun(runId)
    if run and run.status == 'awaiting_worker' then
      local leaseId = 'L' .. redis.call('HINCRBY', base .. ':leases', 'next', 1)
      redis.call('HSET', runMeta(runId), 'status', 'queued', 'worker_id', w.worker_id, 'vm_id', w.vm_id or '',
        'user_id', w.user_id or '', 'session_id', w.session_id or '', 'lease_id', leaseId, 'assigned_at', now, 'updated_at', now,
        'worker', runWorkerView(w, now), 'last_heartbeat_at', now)
      redis.call('ZADD', expiryKey, now + ttl, runId)
      w.run_id = runId
      appendRunEvent(runId, maxLen, channel, 'run-worker-assigned', 'backend', cjson.encode({ worker_id = w.worker_id,
        user_id = orNull(w.user_id), vm_id = orNull(w.vm_id), session_id = orNull(w.session_id),
        agent_id = orNull(w.agent_id), status = 'queued', lease_id = leaseId }))
      assigned = loadRun(runId)
      break
    end
    -- Stale entries (stopped or paused runs) are simply dropped from the queue.
  end
end
redis.call('HSET', workersKey, w.worker_id, cjson.encode(w))

local commands = {}
local key = commandsKey(w.worker_id)
if ARGV[4] == '' then
  commands = redis.call('LRANGE', key, 0, -1)
  if #commands > 0 then redis.call('DEL', key) end
else
  local acked = {}
  for _, id in ipairs(ackedIds) do acked[id] = true end
  for _, raw in ipairs(redis.call('LRANGE', key, 0, -1)) do
    if acked[cjson.decode(raw).command_id] then redis.call('LREM', key, 1, raw) else table.insert(commands, raw) end
  end
end

local out = { worker = w, commands = commands, lost = lost, requeued = requeued }
if assigned then out.assigned_run = assigned end
-- Only when there are some: cjson encodes an empty table as an object.
if #cancelledApprovals > 0 then out.cancelled_approvals = cancelledApprovals end
return cjson.encode(out)
