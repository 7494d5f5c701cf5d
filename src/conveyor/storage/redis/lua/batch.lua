-- batch.lua: a batch's members and counters. Idempotent per job: each job's last known state
-- is kept (its own entry, or its run's), so replaying an update never counts a job twice.
--- @include "_clock"
--- @include "_util"
--- @include "_runs"
--- @key batch   hash: fields, counters "n:<state>", callbacks "cb:<event>", fired "f:<event>", "hi" the last id of the newest run
--- @key jobs    hash job id -> "state:queue" (see _runs.lua for a run's jobs)
--- @key order   zset job id, score 0
--- @key states  zset job id, score = STATE_CODE: pages by state are read by rank
--- @key heads   zset first id of each run not yet indexed, score 0
--- @key runs    hash first id -> "<count> state:queue"
--- @key marks   hash job id -> bumped when a workflow's job enters or leaves a terminal state
-- ARGV: 1 now|'', 2 mode: "add" (jobs join), "set" (jobs moved), "close", "cancel",
--       then pairs: job id, "state:queue" (state "deleted" removes the job);
--       or mode "join" (many jobs join in one state, as "add"): 3 "state:queue", 4 the job
--       ids joined by "\n" (a bulk enqueue sends two strings, not two per job);
--       or mode "runs" (as "join", ids sent as runs, see _runs.lua): 3 "pending:queue" or
--       "scheduled:queue", then pairs: first id, count;
--       or mode "index": 3 how many jobs of the oldest run to index.
-- Returns: {status, due callbacks {event, job spec JSON}..., notes (one line each)}; status
--   "ok", "missing", "finished"; "slow" when "runs" cannot join as runs (nothing written:
--   send the ids with "join"); for "index", "ok" or "none" (no run was left to index).
local mode = ARGV[2]
if redis.call('EXISTS', K_BATCH) == 0 then return {'missing', {}, {}} end
if mode == 'index' then
  return {run_index(tonumber(ARGV[3])) and 'ok' or 'none', {}, run_notes}
end
local joining, running = mode == 'join', mode == 'runs'
if joining or running then mode = 'add' end

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
  return {'finished', {}, {}}
end

local delta, started = {}, false
local function bump(field, by) delta[field] = (delta[field] or 0) + by end

-- Jobs of a bulk enqueue join with ids made in order after every id the batch holds. The
-- greatest of those is the last of K_ORDER or of the newest run ("hi"); false when it cannot
-- be known cheaply (a batch stored before K_ORDER existed: K_ORDER misses jobs of K_JOBS).
-- Lua compares strings with strcoll (redis-server's locale), K_ORDER with memcmp: the two
-- agree on ids of lowercase hex digits (what the client makes), so only those take this way.
local function hex(text) return not string.find(text, '[^0-9a-f\n]') end
local function last_member()
  local hi = redis.call('HGET', K_BATCH, 'hi')
  if not hi and redis.call('ZCARD', K_ORDER) ~= redis.call('HLEN', K_JOBS) then return false end
  local last = redis.call('ZRANGE', K_ORDER, -1, -1)[1]
  if last and not hex(last) then return false end
  if hi and (not last or hi > last) then last = hi end
  return last or ''
end

if running then
  -- One entry per run, counters bumped by its size: no loop per job. An exact replay of
  -- the same runs counts nothing; any other overlap falls back to "join" (the caller's).
  local value = ARGV[3]
  local state = state_of(value)
  local list, fresh = {}, false
  for i = 4, #ARGV, 2 do
    local r = run_make(ARGV[i], ARGV[i + 1], value)
    if not r or (state ~= 'pending' and state ~= 'scheduled') then return {'slow', {}, {}} end
    list[#list + 1] = r
    if redis.call('HGET', K_RUNS, r.head) ~= r.n .. ' ' .. value then fresh = true end
  end
  if fresh then
    local prev = last_member()
    for _, r in ipairs(list) do
      if prev == false or not (r.head > prev) then return {'slow', {}, {}} end
      prev = r.last
    end
    for _, r in ipairs(list) do
      redis.call('HSET', K_RUNS, r.head, r.n .. ' ' .. value)
      redis.call('ZADD', K_HEADS, 0, r.head)
      bump('total', r.n)
      bump('n:' .. state, r.n)
    end
    redis.call('HSET', K_BATCH, 'hi', prev)
  end
end

local ids, values = {}, {}
if joining then
  ids = split_lines(ARGV[4])
  for i = 1, #ids do values[i] = ARGV[3] end
elseif not running then
  for i = 3, #ARGV, 2 do
    ids[#ids + 1] = ARGV[i]
    values[#values + 1] = ARGV[i + 1]
  end
end
local sets, dels, drops = {}, {}, {}
local joined, ranked = {}, {}  -- zadd arguments for K_ORDER and K_STATES
-- Ids that ascend past every id of the batch are all new: they join without reading
-- K_JOBS or a loop per job.
local function all_new()
  if not joining or #ids == 0 or not hex(ARGV[4]) then return false end
  for i = 2, #ids do
    if ids[i] <= ids[i - 1] then return false end
  end
  local last = last_member()
  return last ~= false and ids[1] > last
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
  olds = job_values(ids)
end
-- A workflow's job that enters or leaves a terminal state (or is deleted unfinished) is
-- marked for settling (storage/redis/graph.py): here, where every move of it is reported
-- once, in the workflow's own slot.
local GRAPH = redis.call('HGET', K_BATCH, 'kind') == 'workflow'
local ENDS = {succeeded = true, failed = true, dead = true, cancelled = true, deleted = true}
local function mark(id, old, state)
  if not GRAPH or (old and ENDS[state_of(old)]) == ENDS[state] then return end
  redis.call('HINCRBY', K_MARKS, id, 1)
end
local seen = {}  -- a job named twice in one call: its last value wins, as if called twice
local moved = {}  -- first id of a run -> how many of its jobs got their own entry here
for i = 1, #ids do
  local id, value = ids[i], values[i]
  local state = state_of(value)
  local old = olds[i] or nil
  local marked = old and state_of(old) == 'deleted'  -- a run's job, deleted
  if marked then old = nil end
  -- A job of a run not yet indexed: its run holds its value until it has its own entry.
  local in_run, first = false, nil
  if not marked and (not old or state == 'deleted') then
    local held, r = run_value(id)
    in_run = held ~= nil
    if held and not old then old, first = held, r end
  end
  if seen[id] ~= nil then old, first = seen[id] or nil, nil end
  if old ~= value and (old or mode == 'add') then
    mark(id, old, state)
    if old then bump('n:' .. state_of(old), -1) else bump('total', 1) end
    if first then moved[first.head] = (moved[first.head] or 0) + 1 end
    if state == 'deleted' then
      bump('total', -1)
      drops[#drops + 1] = id
      if in_run then
        sets[#sets + 1], sets[#sets + 2] = id, value  -- the mark
      else
        dels[#dels + 1] = id
      end
      seen[id] = false
    else
      sets[#sets + 1], sets[#sets + 2] = id, value
      if not old or first then  -- a run's job joins K_ORDER when it first moves
        joined[#joined + 1], joined[#joined + 2] = 0, id
      end
      ranked[#ranked + 1], ranked[#ranked + 2] = STATE_CODE[state] or 0, id
      bump('n:' .. state, 1)
      if state == 'active' then started = true end
      seen[id] = value
    end
  end
end
write_members(sets, joined, ranked)
for i = 1, #drops, 1000 do
  local last = math.min(i + 999, #drops)
  redis.call('ZREM', K_ORDER, unpack(drops, i, last))
  redis.call('ZREM', K_STATES, unpack(drops, i, last))
end
for i = 1, #dels, 1000 do
  redis.call('HDEL', K_JOBS, unpack(dels, i, math.min(i + 999, #dels)))
end
run_moved(moved)
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
  if redis.call('HSETNX', K_BATCH, 'fa', NOWS) == 1 then
    -- Waiters of the batch (Storage.batch_finished) subscribe to the channel named as its key;
    -- on Cluster a PUBLISH reaches subscribers on every node.
    redis.call('PUBLISH', K_BATCH, 'finished')
  end
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
return {'ok', due, run_notes, GRAPH and redis.call('HLEN', K_MARKS) or 0}
