-- reclaim.lua: put active jobs of one queue whose lease expired back to pending ("recovered",
-- not an error attempt), or to dead after more than max_recoveries recoveries. Also scans a
-- slice of the job records for active jobs that lost their lease entry (eviction, restore).
-- KEYS: 1 active (zset lease expiry), 2 pending, 3 jobs, 4 events, 5 dead, 6 meta, 7 notify
-- ARGV: 1 now|'', 2 max_recoveries, 3 limit, 4 scan cursor|'' (no scan), 5 scan count
-- Returns: {how many recovered or buried, batch moves, next scan cursor|''}
local K_ACTIVE = KEYS[1]
local K_PENDING = KEYS[2]
local K_JOBS = KEYS[3]
local K_EVENTS = KEYS[4]
local K_DEAD = KEYS[5]
local K_META = KEYS[6]
local K_NOTIFY = KEYS[7]
local max_recoveries = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local done, pushed, moves = 0, 0, {}

local function recover(id, job)
  redis.call('ZREM', K_ACTIVE, id)
  job.r = (job.r or 0) + 1
  job.tk = nil
  job.le = nil
  if job.r > max_recoveries then
    job.s = 'dead'
    job.fa = NOW
    job.msg = 'recovered ' .. job.r .. ' times (poison job?)'
    redis.call('ZADD', K_DEAD, NOW, id)
    count(K_META, 'd', job.n)
    append_events(K_EVENTS, id, event_line('dead', 'dead', job, job.msg))
  else
    job.s = 'pending'
    job.pt = NOW
    redis.call('RPUSH', K_PENDING, id)
    pushed = pushed + 1
    append_events(K_EVENTS, id, event_line('recovered', 'pending', job,
      'lease expired; put back to pending'))
    job.w = nil
  end
  save(K_JOBS, id, job)
  note_batch(moves, job, id, job.s)
  done = done + 1
end

for _, id in ipairs(redis.call('ZRANGEBYSCORE', K_ACTIVE, '-inf', NOW, 'LIMIT', 0, limit)) do
  local job = load(K_JOBS, id)
  if job and job.s == 'active' then recover(id, job) else redis.call('ZREM', K_ACTIVE, id) end
end

local next_cursor = ''
if ARGV[4] ~= '' then
  local page = redis.call('HSCAN', K_JOBS, ARGV[4], 'COUNT', tonumber(ARGV[5]))
  next_cursor = page[1]
  local entries = page[2]
  for i = 1, #entries, 2 do
    if string.find(entries[i + 1], '"s":"active"', 1, true) then
      local id = entries[i]
      if not redis.call('ZSCORE', K_ACTIVE, id) then
        local job = cjson.decode(entries[i + 1])
        if (job.le or 0) <= NOW then recover(id, job) else redis.call('ZADD', K_ACTIVE, job.le, id) end
      end
    end
  end
end
notify(K_NOTIFY, pushed)
return {done, moves, next_cursor}
