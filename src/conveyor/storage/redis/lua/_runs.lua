-- _runs.lua: the jobs of a bulk join, kept as runs. A run is ids that differ only in their
-- last 12 characters, lowercase hex counting up by one (what conveyor.ids.new_ids makes):
-- the batch keeps ONE entry per run (its first id in K_HEADS, "<count> state:queue" in
-- K_RUNS) instead of three per job, until a reader indexes it (run_index) into K_JOBS,
-- K_ORDER and K_STATES in short steps. Meanwhile a run's job that moves gets its own K_JOBS
-- and K_STATES entries, its old value read from its run (run_value); one that is deleted is
-- marked "deleted:<queue>" in K_JOBS, so that its run no longer speaks for it.
-- Runs never overlap: a run joins only past every id the batch holds (batch.lua "runs").
--- @include "_util"
--- @needs-keys jobs order states heads runs
-- Positions in conveyor.job.ALL_STATES, plus one (batches.py reads the same numbers).
local STATE_CODE = {scheduled = 1, pending = 2, active = 3, retrying = 4, succeeded = 5,
  failed = 6, dead = 7, cancelled = 8, waiting = 9, aggregating = 10}
local RUN_DIGITS = 12
local RUN_MAX = 281474976710655  -- 16^12 - 1: the counting part of an id

local function state_of(value)
  return string.sub(value, 1, (string.find(value, ':', 1, true) or #value + 1) - 1)
end

local function lower_hex(text)
  return text ~= '' and not string.find(text, '[^0-9a-f]')
end

local function run_id(r, k)  -- the id at position k (from 0) of run r
  return r.prefix .. string.format('%012x', r.start + k)
end

-- A run from its first id, count and value; nil if they do not make one.
local function run_make(head, n, value)
  n = tonumber(n)
  if #head <= RUN_DIGITS or not lower_hex(head) or not n or n < 1 or n % 1 ~= 0
      or not string.find(value, ':', 1, true) then
    return nil
  end
  local cut = #head - RUN_DIGITS
  local r = {head = head, n = n, value = value, prefix = string.sub(head, 1, cut), cut = cut,
    start = tonumber(string.sub(head, cut + 1), 16)}
  if r.start + n - 1 > RUN_MAX then return nil end
  r.last = run_id(r, n - 1)
  return r
end

local function run_has(r, id)
  if #id ~= #r.head or string.sub(id, 1, r.cut) ~= r.prefix then return false end
  local tail = string.sub(id, r.cut + 1)
  if not lower_hex(tail) then return false end
  local d = tonumber(tail, 16) - r.start
  return d >= 0 and d < r.n
end

-- Runs read by this call, by first id (false: unreadable), and a one-line note for each
-- unreadable one: a damaged entry costs its own batch the jobs it held, nothing else.
local run_cache, run_notes, run_last, run_any = {}, {}, nil, nil
local function run_read(head)
  local r = run_cache[head]
  if r == nil then
    local raw = redis.call('HGET', K_RUNS, head)
    local sp = raw and string.find(raw, ' ', 1, true)
    r = sp and run_make(head, string.sub(raw, 1, sp - 1), string.sub(raw, sp + 1)) or false
    if not r then
      run_notes[#run_notes + 1] = 'run ' .. head .. ' is unreadable: '
        .. string.sub(tostring(raw), 1, 40)  -- the caller escapes it for its log
    end
    run_cache[head] = r
  end
  return r
end

-- The value a run holds for a job of a run not yet indexed, and the run; or nil.
local function run_value(id)
  if run_any == nil then run_any = redis.call('EXISTS', K_HEADS) == 1 end
  if not run_any then return nil end
  if run_last and run_has(run_last, id) then return run_last.value, run_last end
  local head = redis.call('ZREVRANGEBYLEX', K_HEADS, '[' .. id, '-', 'LIMIT', 0, 1)[1]
  local r = head and run_read(head)
  if r and run_has(r, id) then
    run_last = r
    return r.value, r
  end
  return nil
end

-- A run's jobs that got their own entries (moved, or deleted) are counted in K_RUNS under
-- "m:<first id>"; once all have, the run says nothing more and is dropped (a deleted job's
-- mark may stay in K_JOBS: a mark without its run reads as no entry at all).
local function run_moved(moved)
  for head, k in pairs(moved) do
    if redis.call('HINCRBY', K_RUNS, 'm:' .. head, k) >= run_cache[head].n then
      redis.call('ZREM', K_HEADS, head)
      redis.call('HDEL', K_RUNS, head, 'm:' .. head)
    end
  end
end

-- HMGET of K_JOBS for many ids (false for a missing one).
local function job_values(ids)
  local out = {}
  for i = 1, #ids, 1000 do  -- below Lua's unpack limit
    local part = redis.call('HMGET', K_JOBS, unpack(ids, i, math.min(i + 999, #ids)))
    for j = 1, #part do out[i + j - 1] = part[j] end
  end
  return out
end

-- The entries of jobs that join or move: K_JOBS values, K_ORDER and K_STATES members.
local function write_members(sets, ordered, ranked)
  bulk('HSET', K_JOBS, sets)
  bulk('ZADD', K_ORDER, ordered)
  bulk('ZADD', K_STATES, ranked)
end

-- Index up to `limit` jobs of the oldest run into K_JOBS, K_ORDER and K_STATES (the rest of
-- the run stays a run, starting after them). Returns whether a run was there to index.
local function run_index(limit)
  local head = redis.call('ZRANGE', K_HEADS, 0, 0)[1]
  if not head then return false end
  local r = run_read(head)
  local moved = tonumber(redis.call('HGET', K_RUNS, 'm:' .. head) or '0') or 0
  redis.call('ZREM', K_HEADS, head)
  redis.call('HDEL', K_RUNS, head, 'm:' .. head)
  if not r then return true end  -- unreadable: dropped, with its note
  local k = math.min(limit, r.n)
  local ids = {}
  for i = 1, k do ids[i] = run_id(r, i - 1) end
  local olds = job_values(ids)
  local code = STATE_CODE[state_of(r.value)] or 0
  local sets, ordered, ranked, gone = {}, {}, {}, {}
  for i = 1, k do
    local id, old = ids[i], olds[i]
    if old then moved = moved - 1 end
    if not old then  -- never moved: the run's value
      sets[#sets + 1], sets[#sets + 2] = id, r.value
      ranked[#ranked + 1], ranked[#ranked + 2] = code, id
    end
    if old and state_of(old) == 'deleted' then
      gone[#gone + 1] = id  -- its run is gone: the mark is no longer needed
    else
      ordered[#ordered + 1], ordered[#ordered + 2] = 0, id
    end
  end
  write_members(sets, ordered, ranked)
  for i = 1, #gone, 1000 do
    redis.call('HDEL', K_JOBS, unpack(gone, i, math.min(i + 999, #gone)))
  end
  if k < r.n then
    local rest = run_id(r, k)
    redis.call('HSET', K_RUNS, rest, (r.n - k) .. ' ' .. r.value)
    if moved > 0 then redis.call('HSET', K_RUNS, 'm:' .. rest, moved) end
    redis.call('ZADD', K_HEADS, 0, rest)
  end
  return true
end
