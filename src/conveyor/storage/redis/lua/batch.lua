-- batch.lua: a batch's counters. Idempotent per job: each job's last known state is kept in
-- a per-batch hash, so replaying an update never counts a job twice.
--- @include "_clock"
--- @include "_util"
--- @key batch   hash: fields, counters "n:<state>", callbacks "cb:<event>", fired "f:<event>"
--- @key jobs    hash job id -> "state:queue"
--- @key order   zset job id, score 0
--- @key states  zset job id, score = STATE_CODE: pages by state are read by rank
-- ARGV: 1 now|'', 2 mode: "add" (jobs join), "set" (jobs moved), "close", "cancel",
--       then pairs: job id, "state:queue" (state "deleted" removes the job);
--       or mode "join" (many jobs join in one state, as "add"): 3 "state:queue", 4 the job
--       ids joined by "\n" (a bulk enqueue sends two strings, not two per job)
-- Returns: {status "ok"|"missing"|"finished", due callbacks {event, job spec JSON}...}
-- Positions in conveyor.job.ALL_STATES, plus one (inspect.py reads the same numbers).
local STATE_CODE = {scheduled = 1, pending = 2, active = 3, retrying = 4, succeeded = 5,
  failed = 6, dead = 7, cancelled = 8}
local mode = ARGV[2]
local joining = mode == 'join'
if joining then mode = 'add' end
if redis.call('EXISTS', K_BATCH) == 0 then return {'missing', {}} end

-- Counters are read once and written once per call, however many jobs move: a worker's
-- page of acknowledgements costs one HMGET, one HSET and a few HINCRBYs, not five per job.
local FIELDS = {'total', 'closed', 'n:succeeded', 'n:failed', 'n:dead', 'n:cancelled'}
local function counters()
  local raw = redis.call('HMGET', K_BATCH, unpack(FIELDS))
  local c = {}
  for i, field in ipairs(FIELDS) do c[field] = tonumber(raw[i] or '0') or 0 end
  return c
end
local function done(c)
  return c['n:succeeded'] + c['n:failed'] + c['n:dead'] + c['n:cancelled']
end
local c = counters()
if mode == 'add' and c.closed == 1 and done(c) >= c.total then
  return {'finished', {}}
end

local function state_of(value)
  return string.sub(value, 1, string.find(value, ':', 1, true) - 1)
end

local ids, values = {}, {}
if joining then
  ids = split_lines(ARGV[4])
  for i = 1, #ids do values[i] = ARGV[3] end
else
  for i = 3, #ARGV, 2 do
    ids[#ids + 1] = ARGV[i]
    values[#values + 1] = ARGV[i + 1]
  end
end
local delta, sets, dels, started = {}, {}, {}, false
local joined, ranked = {}, {}  -- zadd arguments for K_ORDER and K_STATES
local function bump(field, by) delta[field] = (delta[field] or 0) + by end
-- Jobs of a bulk enqueue join with ids made in order after every id the batch holds: when
-- they ascend past the last id of K_ORDER, and K_ORDER holds every job of the batch, none
-- of them is in the batch yet, so they join without reading K_JOBS or a loop per job.
-- Lua compares strings with strcoll (redis-server's locale), K_ORDER with memcmp: the two
-- agree on ids of lowercase hex digits (what the client makes), so only those take this way.
local function hex(text) return not string.find(text, '[^0-9a-f\n]') end
local function all_new()
  if not joining or #ids == 0 or not hex(ARGV[4]) then return false end
  for i = 2, #ids do
    if ids[i] <= ids[i - 1] then return false end
  end
  if redis.call('ZCARD', K_ORDER) ~= redis.call('HLEN', K_JOBS) then return false end
  local last = redis.call('ZRANGE', K_ORDER, -1, -1)[1]
  if not last then return true end
  return hex(last) and ids[1] > last
end
local olds = {}
if all_new() then
  local value, n = ARGV[3], #ids
  local state = state_of(value)
  local code = STATE_CODE[state] or 0
  for i = 1, n do
    local id = ids[i]
    sets[2 * i - 1], sets[2 * i] = id, value
    joined[2 * i - 1], joined[2 * i] = 0, id
    ranked[2 * i - 1], ranked[2 * i] = code, id
  end
  bump('total', n)
  bump('n:' .. state, n)
  if state == 'active' then started = true end
  ids = {}  -- nothing left for the loop below
else
  for i = 1, #ids, 1000 do  -- below Lua's unpack limit
    local part = redis.call('HMGET', K_JOBS, unpack(ids, i, math.min(i + 999, #ids)))
    for j = 1, #part do olds[i + j - 1] = part[j] end
  end
end
local seen = {}  -- a job named twice in one call: its last value wins, as if called twice
for i = 1, #ids do
  local id, value = ids[i], values[i]
  local old = olds[i]
  if seen[id] ~= nil then old = seen[id] end
  if old == false then old = nil end
  if old ~= value and (old or mode == 'add') then
    local state = state_of(value)
    if old then bump('n:' .. state_of(old), -1) else bump('total', 1) end
    if state == 'deleted' then
      bump('total', -1)
      dels[#dels + 1] = id
      seen[id] = false
    else
      sets[#sets + 1] = id
      sets[#sets + 1] = value
      if not old then
        joined[#joined + 1] = 0
        joined[#joined + 1] = id
      end
      ranked[#ranked + 1] = STATE_CODE[state] or 0
      ranked[#ranked + 1] = id
      bump('n:' .. state, 1)
      if state == 'active' then started = true end
      seen[id] = value
    end
  end
end
bulk('HSET', K_JOBS, sets)
bulk('ZADD', K_ORDER, joined)
bulk('ZADD', K_STATES, ranked)
if #dels > 0 then
  for i = 1, #dels, 1000 do
    redis.call('HDEL', K_JOBS, unpack(dels, i, math.min(i + 999, #dels)))
    redis.call('ZREM', K_ORDER, unpack(dels, i, math.min(i + 999, #dels)))
    redis.call('ZREM', K_STATES, unpack(dels, i, math.min(i + 999, #dels)))
  end
end
for field, by in pairs(delta) do
  if by ~= 0 then redis.call('HINCRBY', K_BATCH, field, by) end
end
if started then redis.call('HSETNX', K_BATCH, 'sa', NOWS) end
if mode == 'close' then redis.call('HSET', K_BATCH, 'closed', 1) end
if mode == 'cancel' then redis.call('HSET', K_BATCH, 'cancelled', 1) end

c = counters()
local total = c.total
local finished = false
if c.closed == 1 and done(c) >= total then
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
consider('success', finished and c['n:succeeded'] >= total)
consider('death', c['n:dead'] > 0)
return {'ok', due}
