-- Shared by every run script (inlined at `--@include run-log`). All of a workspace's run keys share the hash tag
-- `{w:<workspace>}` so a heartbeat (worker, queue, run, log, commands) is one script on one slot. Scripts get
-- the workspace's base key (`<prefix>:{w:<ws>}`) as ARGV[1] and KEYS[1] = `<base>:workers` for routing; every
-- other key is derived from the base, so it is in the same slot.
--@include event-log

local base = ARGV[1]
local workersKey = base .. ':workers'
local queueKey = base .. ':queue'          -- list: run ids awaiting a worker, FIFO (requeued runs go first)
local activeKey = base .. ':active'        -- set: runs not yet stopped/completed/failed (the active-run cap)
local expiryKey = base .. ':expiry'        -- zset: bound run id -> lease expiry (ms)
-- also <base>:runs (zset: run id -> created ms, for listing) and <base>:leases (lease id counter)
local function runMeta(runId) return base .. ':run:' .. runId .. ':meta' end
local function runEvents(runId) return base .. ':run:' .. runId .. ':events' end
local function commandsKey(workerId) return base .. ':cmds:' .. workerId end

local RUN_TERMINAL = { stopped = true, completed = true, failed = true }

local function appendRunEvent(runId, maxLen, channel, eventType, source, payload)
  return appendToLog(runMeta(runId), runEvents(runId), 'run:' .. runId, maxLen, channel,
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

-- Queues a control command for the run's bound worker; it is delivered on the worker's next heartbeat.
local function queueCommand(run, commandId, action, controlMode, requestedBy, now)
  local cmd = { command_id = commandId, run_id = run.run_id, action = action, requested_by = requestedBy, created_at = now }
  if controlMode ~= '' then cmd.control_mode = controlMode end
  redis.call('RPUSH', commandsKey(run.worker_id), cjson.encode(cmd))
end

-- Stops one active run: the log gets run-control, its worker (if any) a stop command.
local function stopRun(run, commandId, requestedBy, now, maxLen, channel, retentionSec)
  local bound = run.worker_id ~= nil and run.worker_id ~= ''
  if bound then queueCommand(run, commandId, 'stop', '', requestedBy, now) end
  finishRun(run.run_id, 'stopped', now, '', retentionSec)
  appendRunEvent(run.run_id, maxLen, channel, 'run-control', 'backend',
    cjson.encode({ action = 'stop', requested_by = requestedBy, command_id = bound and commandId or cjson.null, status = 'stopped' }))
end

-- Runs whose bound worker stopped heartbeating lose their lease: back to the front of the queue as
-- awaiting_worker (run-worker-lost, run-requeued), or failed after `maxAttempts` losses.
local function expireLeases(now, maxAttempts, maxLen, channel, retentionSec)
  local expired = redis.call('ZRANGEBYSCORE', expiryKey, '-inf', now)
  for _, runId in ipairs(expired) do
    redis.call('ZREM', expiryKey, runId)
    local run = loadRun(runId)
    if run and not RUN_TERMINAL[run.status] and run.worker_id ~= '' then
      local attempts = tonumber(run.attempts or '0') + 1
      appendRunEvent(runId, maxLen, channel, 'run-worker-lost', 'backend',
        cjson.encode({ worker_id = run.worker_id, lease_id = run.lease_id, attempts = attempts }))
      local w = loadWorker(run.worker_id)
      if w and w.run_id == runId then
        w.run_id = nil
        redis.call('HSET', workersKey, w.worker_id, cjson.encode(w))
      end
      redis.call('HSET', runMeta(runId), 'attempts', attempts, 'worker_id', '', 'vm_id', '', 'lease_id', '', 'turn_ref', '', 'updated_at', now)
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
        appendRunEvent(runId, maxLen, channel, 'run-requeued', 'backend', cjson.encode({ attempts = attempts }))
      end
    end
  end
  return #expired
end
