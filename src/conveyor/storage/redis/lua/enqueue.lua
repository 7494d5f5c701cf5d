-- enqueue.lua: store new jobs of one queue, pending or scheduled (DESIGN §2 "enqueue").
-- KEYS: 1 jobs (hash id->record JSON), 2 pending (list), 3 scheduled (zset run_at),
--       4 notify (list), 5 unique (hash unique_key -> "expiry|job id")
-- ARGV: 1 now|'', then 5 per job: id, run_at|'', record JSON tail (without "{" and state),
--       unique_key|'', unique_for seconds|''
-- Returns: one string per job: "1" created, "0" the id already existed, "=<id>" a unique job
--          holding the lock already exists.
local K_JOBS = KEYS[1]
local K_PENDING = KEYS[2]
local K_SCHEDULED = KEYS[3]
local K_NOTIFY = KEYS[4]
local K_UNIQUE = KEYS[5]

local function unique_holder(ukey)
  local held = redis.call('HGET', K_UNIQUE, ukey)
  if not held then return nil end
  local sep = string.find(held, '|', 1, true)
  local expiry = tonumber(string.sub(held, 1, sep - 1))
  local holder = string.sub(held, sep + 1)
  -- Held while the job is not finished, and in any case for unique_for after enqueue.
  if expiry > NOW then return holder end
  local job = load(K_JOBS, holder)
  if not job or TERMINAL[job.s] then return nil end
  return holder
end

local out = {}
local pushed = 0
local head_pending = '{"s":"pending","c":' .. NOWS .. ','
local head_scheduled = '{"s":"scheduled","sc":1,"c":' .. NOWS .. ','
for i = 2, #ARGV, 5 do
  local id, run_at, tail, ukey = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local holder = nil
  if ukey ~= '' then holder = unique_holder(ukey) end
  if holder then
    out[#out + 1] = '=' .. holder
  elseif redis.call('HEXISTS', K_JOBS, id) == 1 then
    out[#out + 1] = '0'
  else
    if ukey ~= '' then
      local ufor = tonumber(ARGV[i + 4]) or 0
      local expiry = 0
      if ufor > 0 then expiry = NOW + ufor end
      redis.call('HSET', K_UNIQUE, ukey, string.format('%.6f', expiry) .. '|' .. id)
    end
    local when = tonumber(run_at)
    if when and when > NOW then
      redis.call('HSET', K_JOBS, id, head_scheduled .. tail)
      redis.call('ZADD', K_SCHEDULED, when, id)
    else
      redis.call('HSET', K_JOBS, id, head_pending .. tail)
      redis.call('LPUSH', K_PENDING, id)
      pushed = pushed + 1
    end
    out[#out + 1] = '1'
  end
end
notify(K_NOTIFY, pushed)
return out
