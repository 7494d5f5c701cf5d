-- promote.lua: move scheduled and retrying jobs of one queue whose time has come to pending.
-- KEYS: 1 scheduled (zset run_at), 2 retrying (zset run_at), 3 pending (list), 4 jobs,
--       5 notify, 6 events
-- ARGV: 1 now|'', 2 limit
-- Returns: {how many moved, batch moves {batch id, job id, "pending:queue"}}
local K_SCHEDULED = KEYS[1]
local K_RETRYING = KEYS[2]
local K_PENDING = KEYS[3]
local K_JOBS = KEYS[4]
local K_NOTIFY = KEYS[5]
local K_EVENTS = KEYS[6]
local limit = tonumber(ARGV[2])
local moved, moves = 0, {}
for _, K_FROM in ipairs({K_SCHEDULED, K_RETRYING}) do
  if moved < limit then
    local ids = redis.call('ZRANGEBYSCORE', K_FROM, '-inf', NOW, 'LIMIT', 0, limit - moved)
    for _, id in ipairs(ids) do
      redis.call('ZREM', K_FROM, id)
      local job = load(K_JOBS, id)
      if job and (job.s == 'scheduled' or job.s == 'retrying') then
        job.s = 'pending'
        job.pt = NOW
        job.w = nil
        save(K_JOBS, id, job)
        append_events(K_EVENTS, id, event_line('enqueued', 'pending', job))
        redis.call('LPUSH', K_PENDING, id)
        note_batch(moves, job, id, 'pending')
        moved = moved + 1
      end
    end
  end
end
notify(K_NOTIFY, moved)
return {moved, moves}
