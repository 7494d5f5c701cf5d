-- dequeue.lua: lease up to `count` pending jobs of one queue (DESIGN §2 "dequeue (lease)").
-- KEYS: 1 pending (list), 2 active (zset lease expiry), 3 jobs (hash), 4 events (hash),
--       5 meta (hash: paused flag, counters), 6 dead (zset finished_at)
-- ARGV: 1 now|'', 2 worker id, 3 count, 4 lease seconds, 5 token prefix, 6 token suffix
-- Returns: {leased, batch moves}; leased = {id, name, payload, token, attempt, errors,
--          max_retries, timeout|'', batch|'', recoveries} per job; batch moves =
--          {batch id, job id, "state:queue"} for batch.lua.
local K_PENDING = KEYS[1]
local K_ACTIVE = KEYS[2]
local K_JOBS = KEYS[3]
local K_EVENTS = KEYS[4]
local K_META = KEYS[5]
local K_DEAD = KEYS[6]

if redis.call('HEXISTS', K_META, 'paused') == 1 then return {{}, {}} end
local want = tonumber(ARGV[3])
local lease = tonumber(ARGV[4])
local out, moves = {}, {}
local seq = 0

local function expire(id, job)
  job.s = 'dead'
  job.fa = NOW
  job.msg = 'deadline passed before the job could start'
  save(K_JOBS, id, job)
  redis.call('ZADD', K_DEAD, NOW, id)
  append_events(K_EVENTS, id, event_line('expired', 'dead', job, job.msg))
  count(K_META, 'd', job.n)
  note_batch(moves, job, id, 'dead')
end

local function lease_job(id, job)
  seq = seq + 1
  local token = ARGV[5] .. seq .. ARGV[6]
  job.s = 'active'
  job.a = (job.a or 0) + 1
  job.tk = token
  job.w = ARGV[2]
  job.le = NOW + lease
  job.sa = NOW
  save(K_JOBS, id, job)
  redis.call('ZADD', K_ACTIVE, job.le, id)
  append_events(K_EVENTS, id, event_line('started', 'active', job))
  out[#out + 1] = {id, job.n, job.p, token, job.a, job.e or 0, job.m, job.to or '', job.b or '',
                   job.r or 0}
  note_batch(moves, job, id, 'active')
end

while #out < want do
  local ids = redis.call('RPOP', K_PENDING, want - #out)
  if not ids then break end
  for _, id in ipairs(ids) do
    local job = load(K_JOBS, id)
    -- A missing or non-pending record is a stale list entry (deleted job): drop it.
    if job and job.s == 'pending' then
      if job.dl and job.dl < NOW then expire(id, job) else lease_job(id, job) end
    end
  end
end
return {out, moves}
