-- batch.lua: a batch's counters. Idempotent per job: each job's last known state is kept in
-- a per-batch hash, so replaying an update never counts a job twice.
-- KEYS: 1 batch (hash: fields, counters "n:<state>", callbacks "cb:<event>", fired "f:<event>"),
--       2 batch jobs (hash job id -> "state:queue")
-- ARGV: 1 now|'', 2 mode: "add" (jobs join), "set" (jobs moved), "close", "cancel",
--       then pairs: job id, "state:queue" (state "deleted" removes the job)
-- Returns: {status "ok"|"missing"|"finished", due callbacks {event, job spec JSON}...}
local K_BATCH = KEYS[1]
local K_BJOBS = KEYS[2]
local mode = ARGV[2]
if redis.call('EXISTS', K_BATCH) == 0 then return {'missing', {}} end
local function num(field) return tonumber(redis.call('HGET', K_BATCH, field) or '0') end
local function done()
  return num('n:succeeded') + num('n:failed') + num('n:dead') + num('n:cancelled')
end
if mode == 'add' and num('closed') == 1 and done() >= num('total') then
  return {'finished', {}}
end

local function state_of(value)
  return string.sub(value, 1, string.find(value, ':', 1, true) - 1)
end

local function move(id, value)
  local old = redis.call('HGET', K_BJOBS, id)
  if old == value then return end
  local state = state_of(value)
  if not old then
    if mode ~= 'add' then return end
    redis.call('HINCRBY', K_BATCH, 'total', 1)
  else
    redis.call('HINCRBY', K_BATCH, 'n:' .. state_of(old), -1)
  end
  if state == 'deleted' then
    redis.call('HDEL', K_BJOBS, id)
    redis.call('HINCRBY', K_BATCH, 'total', -1)
    return
  end
  redis.call('HSET', K_BJOBS, id, value)
  redis.call('HINCRBY', K_BATCH, 'n:' .. state, 1)
  if state == 'active' then redis.call('HSETNX', K_BATCH, 'sa', NOWS) end
end

for i = 3, #ARGV, 2 do move(ARGV[i], ARGV[i + 1]) end
if mode == 'close' then redis.call('HSET', K_BATCH, 'closed', 1) end
if mode == 'cancel' then redis.call('HSET', K_BATCH, 'cancelled', 1) end

local total = num('total')
local finished = false
if num('closed') == 1 and done() >= total then
  finished = true
  redis.call('HSETNX', K_BATCH, 'fa', NOWS)
else
  redis.call('HDEL', K_BATCH, 'fa')  -- a job retried by hand re-opens a finished batch
end

-- Callbacks not yet marked fired are reported every time until the caller marks them, so a
-- crash between enqueueing one and marking it only leads to an idempotent re-enqueue.
local due = {}
local function consider(event, cond)
  if not cond or redis.call('HEXISTS', K_BATCH, 'f:' .. event) == 1 then return end
  local spec = redis.call('HGET', K_BATCH, 'cb:' .. event)
  if spec then due[#due + 1] = {event, spec} end
end
consider('complete', finished)
consider('success', finished and num('n:succeeded') >= total)
consider('death', num('n:dead') > 0)
return {'ok', due}
