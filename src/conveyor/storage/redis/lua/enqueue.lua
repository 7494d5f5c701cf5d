-- enqueue.lua: store new jobs of one queue, pending or scheduled (DESIGN §2 "enqueue").
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @include "_record"
--- @include "_groups"
--- @include "_lineup"
--- @key jobs       hash id -> static JSON
--- @key state      hash id -> state line + events
--- @key pending    list
--- @key scheduled  zset run_at
--- @key waiting    zset created_at: workflow nodes waiting for their parents
--- @key notify     list
--- @key unique     hash unique key -> "expiry|job id"
--- @key aggregating    zset member id -> arrival
--- @key groups         hash group id -> record
--- @key group_due      zset group id -> flush time
--- @key group_members  zset lex entries of members by group and arrival
--- @key meta           hash: the lineup's arrival counter
--- @key lineup         zset: lined pending jobs (_lineup.lua)
--- @key lined          hash id -> its lineup entry
--- @key aging          zset id -> when aging raises it next
-- ARGV: 1 now|'', 2 queue, 3 layout, then
--   layout "others": 4 n, the n other queues' jobs hashes (a caller-chosen id on a single
--       server, not Cluster: an id another queue holds is taken too), then as "each"
--   layout "each": 11 per job: id, run_at|''|'w' (a workflow node waiting for its parents),
--       static JSON, name, batch|'', deadline|'',
--       unique_key|'', unique_for seconds|'', flow-controlled "1"|lined "l"|member "g..."|'',
--       fold_key|'' (debounce / throttle), fold mode|''
--   layout "block" (jobs of one name sharing every field but id and payload, no flow
--       control, no id twice): 4 name, 5 batch|'', 6 deadline|'', 7 run_at|'', then the n
--       ids, then their n static JSONs (each job's fields are read from ARGV where they
--       are: no string is cut or copied per job before the writes)
-- Returns: one string per job: "1" created, "0" the id already existed (in any queue of
--          the "others" layout), "=<id>" a unique job
--          holding the lock already exists, or the scheduled job of its fold key that the
--          call joined (its newest arguments, and under debounce its later run time), "a"
--          created as a member waiting in its aggregation group; layout "block": those
--          codes ("1" or "0") concatenated into one string.

local FRESH = {}  -- ids created by this call (their state is written at the end)

-- Held while the job is not finished, and in any case for unique_for after enqueue.
local function unique_holder(ukey)
  local held = redis.call('HGET', K_UNIQUE, ukey)
  if not held then return nil end
  local sep = string.find(held, '|', 1, true)
  if not sep then return nil end  -- a damaged lock entry holds nothing
  local holder = string.sub(held, sep + 1)
  if FRESH[holder] then return holder end
  if num(string.sub(held, 1, sep - 1)) > NOW then return holder end
  local f = load(K_STATE, holder)
  if not f or TERMINAL[f[F_STATE]] then return nil end
  return holder
end

-- Fold keys share the unique hash, apart from unique keys by this prefix (storage/rules.py's
-- FOLD_PREFIX).
local FOLD = '\31fold:'

-- The job a debounced or throttled call joins: its key's job while it is still scheduled
-- (a job of a fold key is written at once, so the next call of this one finds it too).
local function fold_holder(fkey)
  local held = redis.call('HGET', K_UNIQUE, FOLD .. fkey)
  if not held then return nil end
  local sep = string.find(held, '|', 1, true)
  if not sep then return nil end
  local holder = string.sub(held, sep + 1)
  local f = load(K_STATE, holder)
  if f and f[F_STATE] == 'scheduled' then return holder end
  return nil
end

-- Join a call to the scheduled job ``holder``: the call's arguments ("p") when it keeps the
-- last, its run time under debounce (state line, schedule and record). A record that
-- cannot be read is left as it is: the worker reports that job, the call is still folded.
local function fold_into(holder, static, run_at, mode)
  local moves = mode == 'debounce' or mode == 'debounce-first'
  local replaces = mode == 'debounce' or mode == 'throttle-last'
  local ok, old = pcall(cjson.decode, redis.call('HGET', K_JOBS, holder) or '')
  local fine, new = pcall(cjson.decode, static)
  if not (ok and fine and type(old) == 'table' and type(new) == 'table') then return end
  if replaces then old.p = new.p end
  local when = tonumber(run_at)
  if moves and when then
    old.ra = when
    local f, events = load(K_STATE, holder)
    f[F_RUN_AT] = run_at
    save(K_STATE, holder, f, events)
    redis.call('ZADD', K_SCHEDULED, when, holder)
  end
  if moves or replaces then redis.call('HSET', K_JOBS, holder, cjson.encode(old)) end
end

local BLOCK = ARGV[3] == 'block'
local ids, statics, at = {}, {}, {}
local OTHERS, first = {}, 4
if ARGV[3] == 'others' then
  for i = 1, tonumber(ARGV[4]) do OTHERS[i] = ARGV[4 + i] end
  first = 5 + #OTHERS
end
if not BLOCK then
  for i = first, #ARGV, 11 do
    ids[#ids + 1] = ARGV[i]
    statics[#statics + 1] = ARGV[i + 2]
    at[#at + 1] = i
  end
end
-- Job j's run_at, name, batch, deadline, unique key, unique_for, flow-controlled flag,
-- fold key and fold mode.
local function job_fields(j)
  local i = at[j]
  return ARGV[i + 1], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7],
    ARGV[i + 8], ARGV[i + 9], ARGV[i + 10]
end

-- Which of the values t[first..last] (ids) exist already: one HMGET per 1,000 ids instead
-- of an HSETNX per job; returns (position - first + 1) -> true, and how many.
local function existing(t, first, last)
  local exists, found = {}, 0
  for i = first, last, 1000 do
    local part = redis.call('HMGET', K_JOBS, unpack(t, i, math.min(i + 999, last)))
    for j = 1, #part do
      if part[j] then exists[i - first + j], found = true, found + 1 end
    end
  end
  return exists, found
end

-- A new job's state line: every field not set here is ''. Jobs of a block share one line,
-- so it is packed once per distinct (run_at, name, batch, deadline, flag).
local line = {}
for f = 1, NFIELDS do line[f] = '' end
line[F_CREATED_AT], line[F_ATTEMPTS], line[F_ERRORS], line[F_RECOVERIES] = NOWS, '0', '0', '0'
local last_key, last_line, last_when
local function state_line(run_at, name, batch, deadline, limited, aggregating)
  local key = run_at .. '\t' .. name .. '\t' .. batch .. '\t' .. deadline .. '\t' .. limited
  if aggregating then key = key .. '\ta' end
  if key == last_key then return last_line, last_when end
  local when = tonumber(run_at)
  line[F_NAME], line[F_BATCH], line[F_DEADLINE] = name, batch, deadline
  line[F_FLOW_CONTROLLED] = limited
  if run_at == 'w' then
    when = 'w'
    line[F_STATE], line[F_PENDING_SINCE], line[F_RUN_AT] = 'waiting', '', ''
    line[F_CREATED_SCHEDULED] = ''
  elseif when and when > NOW then
    line[F_STATE], line[F_PENDING_SINCE], line[F_RUN_AT] = 'scheduled', '', run_at
    line[F_CREATED_SCHEDULED] = '1'
  elseif aggregating then
    when = 'a'
    line[F_STATE], line[F_PENDING_SINCE], line[F_RUN_AT] = 'aggregating', NOWS, ''
    line[F_CREATED_SCHEDULED] = 'a'
  else
    when = nil
    line[F_STATE], line[F_PENDING_SINCE], line[F_RUN_AT] = 'pending', NOWS, ''
    line[F_CREATED_SCHEDULED] = ''
  end
  last_key, last_line, last_when = key, pack(line, ''), when
  return last_line, last_when
end

local out, jobs, pending, states, scheduled, waiting = {}, {}, {}, {}, {}, {}
-- A block: its jobs share one state line and hold no id twice, so one loop of table writes
-- per job, and when none of them exists its ids go to the pending list straight from ARGV.
if BLOCK then
  local n = (#ARGV - 7) / 2
  local exists, found = existing(ARGV, 8, 7 + n)
  local packed, when = state_line(ARGV[7], ARGV[4], ARGV[5], ARGV[6], '')
  local fresh = 0
  for j = 1, n do
    if not exists[j] then
      local id = ARGV[7 + j]
      fresh = fresh + 1
      jobs[2 * fresh - 1], jobs[2 * fresh] = id, ARGV[7 + n + j]
      states[2 * fresh - 1], states[2 * fresh] = id, packed
      if when then
        scheduled[2 * fresh - 1], scheduled[2 * fresh] = when, id
      elseif found > 0 then
        pending[fresh] = id
      end
    end
  end
  bulk('HSET', K_JOBS, jobs)
  bulk('HSET', K_STATE, states)
  bulk('ZADD', K_SCHEDULED, scheduled)
  if not when and found == 0 then
    for i = 8, 7 + n, 2000 do
      redis.call('LPUSH', K_PENDING, unpack(ARGV, i, math.min(i + 1999, 7 + n)))
    end
  end
  bulk('LPUSH', K_PENDING, pending)
  if not when then notify(K_NOTIFY, fresh) end
  if found == 0 then return string.rep('1', n) end
  for j = 1, n do out[j] = exists[j] and '0' or '1' end
  return table.concat(out)  -- "1"/"0" only: one string, not one per job
end

local exists = existing(ids, 1, #ids)
-- An id names one job in the store (docs/api.md, "Job ids"): one another queue holds is
-- taken, read in this same step, so two clients cannot both store it in two queues.
if #OTHERS > 0 then
  for j = 1, #ids do
    for k = 1, #OTHERS do
      if exists[j] then break end
      if redis.call('HEXISTS', OTHERS[k], ids[j]) == 1 then exists[j] = true end
    end
  end
end
local lined_now = 0  -- jobs put in the lineup, not the pending list
for j = 1, #ids do
  local id = ids[j]
  local run_at, name, batch, deadline, ukey, ufor, limited, fkey, fmode = job_fields(j)
  local holder = nil
  if ukey ~= '' then holder = unique_holder(ukey) end
  if fkey ~= '' and not exists[j] and not FRESH[id] then
    holder = fold_holder(fkey)
    if holder then fold_into(holder, statics[j], run_at, fmode) end
    if not holder then redis.call('HSET', K_UNIQUE, FOLD .. fkey, '0|' .. id) end
  end
  if holder then
    out[#out + 1] = '=' .. holder
  elseif exists[j] or FRESH[id] then
    out[#out + 1] = '0'
  else
    jobs[#jobs + 1] = id
    jobs[#jobs + 1] = statics[j]
    if ukey ~= '' then
      local seconds = tonumber(ufor) or 0
      local expiry = 0
      if seconds > 0 then expiry = NOW + seconds end
      redis.call('HSET', K_UNIQUE, ukey, string.format('%.6f', expiry) .. '|' .. id)
    end
    -- A member due now joins its group: it waits there, or leads the group's run at once.
    local member = nil
    if string.sub(limited, 1, 1) == 'g' and run_at ~= 'w'
        and not ((tonumber(run_at) or 0) > NOW) then
      member = {[F_FLOW_CONTROLLED] = limited, [F_NAME] = name, [F_PENDING_SINCE] = NOWS}
      if join(member, id) then member = nil end
    end
    local packed, when = state_line(run_at, name, batch, deadline, limited, member ~= nil)
    states[#states + 1] = id
    states[#states + 1] = packed
    if when == 'a' then
      add_member(member, id)
      out[#out + 1] = 'a'
    elseif when == 'w' then
      waiting[#waiting + 1] = NOW
      waiting[#waiting + 1] = id
    elseif when then
      scheduled[#scheduled + 1] = when
      scheduled[#scheduled + 1] = id
    elseif limited == 'l' then
      line_push(id, statics[j])
      lined_now = lined_now + 1
    else
      pending[#pending + 1] = id
    end
    FRESH[id] = true
    if when ~= 'a' then out[#out + 1] = '1' end
    if fkey ~= '' then  -- written now: the next call of its key in this script joins it
      bulk('HSET', K_JOBS, jobs)
      bulk('HSET', K_STATE, states)
      bulk('ZADD', K_SCHEDULED, scheduled)
      jobs, states, scheduled = {}, {}, {}
    end
  end
end
bulk('HSET', K_JOBS, jobs)
bulk('HSET', K_STATE, states)
bulk('ZADD', K_SCHEDULED, scheduled)
bulk('ZADD', K_WAITING, waiting)
bulk('LPUSH', K_PENDING, pending)
write_groups()
notify(K_NOTIFY, #pending + lined_now)
return out
