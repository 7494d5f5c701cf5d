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
-- ARGV: 1 now|'', 2 queue, then 9 per job: id, run_at|'', static JSON, name, batch|'',
--       deadline|'', unique_key|'', unique_for seconds|'', flow-controlled "1"|''
-- Returns: one string per job: "1" created, "0" the id already existed, "=<id>" a unique job
--          holding the lock already exists.

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

-- A new job's state line, refilled for each job: every field not set here is ''.
local line = {}
for f = 1, NFIELDS do line[f] = '' end
line[F_CREATED_AT], line[F_ATTEMPTS], line[F_ERRORS], line[F_RECOVERIES] = NOWS, '0', '0', '0'

local out, pending, states, scheduled = {}, {}, {}, {}
for i = 3, #ARGV, 9 do
  local id, run_at, ukey = ARGV[i], ARGV[i + 1], ARGV[i + 6]
  local holder = nil
  if ukey ~= '' then holder = unique_holder(ukey) end
  if holder then
    out[#out + 1] = '=' .. holder
  elseif redis.call('HSETNX', K_JOBS, id, ARGV[i + 2]) == 0 then
    out[#out + 1] = '0'
  else
    if ukey ~= '' then
      local ufor = tonumber(ARGV[i + 7]) or 0
      local expiry = 0
      if ufor > 0 then expiry = NOW + ufor end
      redis.call('HSET', K_UNIQUE, ukey, string.format('%.6f', expiry) .. '|' .. id)
    end
    local when = tonumber(run_at)
    line[F_NAME], line[F_BATCH], line[F_DEADLINE] = ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
    line[F_FLOW_CONTROLLED] = ARGV[i + 8]
    if when and when > NOW then
      line[F_STATE], line[F_PENDING_SINCE], line[F_RUN_AT] = 'scheduled', '', run_at
      line[F_CREATED_SCHEDULED] = '1'
      scheduled[#scheduled + 1] = when
      scheduled[#scheduled + 1] = id
    else
      line[F_STATE], line[F_PENDING_SINCE], line[F_RUN_AT] = 'pending', NOWS, ''
      line[F_CREATED_SCHEDULED] = ''
      pending[#pending + 1] = id
    end
    states[#states + 1] = id
    states[#states + 1] = pack(line, '')
    FRESH[id] = true
    out[#out + 1] = '1'
  end
end
bulk('HSET', K_STATE, states)
bulk('ZADD', K_SCHEDULED, scheduled)
bulk('LPUSH', K_PENDING, pending)
notify(K_NOTIFY, #pending)
return out
