-- enqueue.lua: store new jobs of one queue, pending or scheduled (DESIGN §2 "enqueue").
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @include "_record"
--- @key jobs       hash id -> static JSON
--- @key state      hash id -> state line + events
--- @key pending    list
--- @key scheduled  zset run_at
--- @key notify     list
--- @key unique     hash unique key -> "expiry|job id"
-- ARGV: 1 now|'', 2 queue, 3 layout, then
--   layout "each": 9 per job: id, run_at|'', static JSON, name, batch|'', deadline|'',
--       unique_key|'', unique_for seconds|'', flow-controlled "1"|''
--   layout "block" (jobs of one name sharing every field but id and payload, no flow
--       control): 4 name, 5 batch|'', 6 deadline|'', 7 run_at|'', 8 the ids joined by "\n",
--       9 their static JSONs joined by "\n" (ASCII JSON holds no raw newline)
-- Returns: one string per job: "1" created, "0" the id already existed, "=<id>" a unique job
--          holding the lock already exists; layout "block": those codes ("1" or "0")
--          concatenated into one string.

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

local BLOCK = ARGV[3] == 'block'
local ids, statics, at = {}, {}, {}
if BLOCK then
  ids, statics = split_lines(ARGV[8]), split_lines(ARGV[9])
else
  for i = 4, #ARGV, 9 do
    ids[#ids + 1] = ARGV[i]
    statics[#statics + 1] = ARGV[i + 2]
    at[#at + 1] = i
  end
end
-- Job j's run_at, name, batch, deadline, unique key, unique_for and flow-controlled flag.
local function job_fields(j)
  if BLOCK then return ARGV[7], ARGV[4], ARGV[5], ARGV[6], '', '', '' end
  local i = at[j]
  return ARGV[i + 1], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7],
    ARGV[i + 8]
end

-- Which ids exist already: one HMGET per 1,000 ids instead of an HSETNX per job.
local exists = {}
for i = 1, #ids, 1000 do
  local part = redis.call('HMGET', K_JOBS, unpack(ids, i, math.min(i + 999, #ids)))
  for j = 1, #part do
    if part[j] then exists[i + j - 1] = true end
  end
end

-- A new job's state line: every field not set here is ''. Jobs of a block share one line,
-- so it is packed once per distinct (run_at, name, batch, deadline, flag).
local line = {}
for f = 1, NFIELDS do line[f] = '' end
line[F_CREATED_AT], line[F_ATTEMPTS], line[F_ERRORS], line[F_RECOVERIES] = NOWS, '0', '0', '0'
local last_key, last_line, last_when
local function state_line(run_at, name, batch, deadline, limited)
  local key = run_at .. '\t' .. name .. '\t' .. batch .. '\t' .. deadline .. '\t' .. limited
  if key == last_key then return last_line, last_when end
  local when = tonumber(run_at)
  line[F_NAME], line[F_BATCH], line[F_DEADLINE] = name, batch, deadline
  line[F_FLOW_CONTROLLED] = limited
  if when and when > NOW then
    line[F_STATE], line[F_PENDING_SINCE], line[F_RUN_AT] = 'scheduled', '', run_at
    line[F_CREATED_SCHEDULED] = '1'
  else
    when = nil
    line[F_STATE], line[F_PENDING_SINCE], line[F_RUN_AT] = 'pending', NOWS, ''
    line[F_CREATED_SCHEDULED] = ''
  end
  last_key, last_line, last_when = key, pack(line, ''), when
  return last_line, last_when
end

local out, jobs, pending, states, scheduled = {}, {}, {}, {}, {}
-- A block of ids in ascending order (as the client makes them) holds no id twice, and its
-- jobs share one state line: one loop of table writes per job, nothing else.
local ascending = BLOCK
for j = 2, BLOCK and #ids or 0 do
  if ids[j] <= ids[j - 1] then ascending = false break end
end
if ascending then
  local packed, when = state_line(ARGV[7], ARGV[4], ARGV[5], ARGV[6], '')
  local fresh = 0
  for j = 1, #ids do
    if exists[j] then
      out[j] = '0'
    else
      local id = ids[j]
      out[j] = '1'
      fresh = fresh + 1
      jobs[2 * fresh - 1], jobs[2 * fresh] = id, statics[j]
      states[2 * fresh - 1], states[2 * fresh] = id, packed
      if when then
        scheduled[2 * fresh - 1], scheduled[2 * fresh] = when, id
      else
        pending[fresh] = id
      end
    end
  end
  ids = {}  -- nothing left for the loop below
end
for j = 1, #ids do
  local id = ids[j]
  local run_at, name, batch, deadline, ukey, ufor, limited = job_fields(j)
  local holder = nil
  if ukey ~= '' then holder = unique_holder(ukey) end
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
    local packed, when = state_line(run_at, name, batch, deadline, limited)
    states[#states + 1] = id
    states[#states + 1] = packed
    if when then
      scheduled[#scheduled + 1] = when
      scheduled[#scheduled + 1] = id
    else
      pending[#pending + 1] = id
    end
    FRESH[id] = true
    out[#out + 1] = '1'
  end
end
bulk('HSET', K_JOBS, jobs)
bulk('HSET', K_STATE, states)
bulk('ZADD', K_SCHEDULED, scheduled)
bulk('LPUSH', K_PENDING, pending)
notify(K_NOTIFY, #pending)
if BLOCK then return table.concat(out) end  -- "1"/"0" only: one string, not one per job
return out
