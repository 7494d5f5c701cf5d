-- extend.lua: a worker's heartbeat for the jobs it holds in one queue: extend their leases.
-- KEYS: 1 jobs, 2 active (zset lease expiry)
-- ARGV: 1 now|'', 2 lease seconds, then pairs: job id, token
-- Returns: {lost ids (lease no longer this token's), ids whose cancellation was requested}
local K_JOBS = KEYS[1]
local K_ACTIVE = KEYS[2]
local lease = tonumber(ARGV[2])
local lost, cancel = {}, {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  local job = load(K_JOBS, id)
  if not job or job.s ~= 'active' or job.tk ~= ARGV[i + 1] then
    lost[#lost + 1] = id
  else
    job.le = NOW + lease
    save(K_JOBS, id, job)
    redis.call('ZADD', K_ACTIVE, job.le, id)
    if job.cr then cancel[#cancel + 1] = id end
  end
end
return {lost, cancel}
