-- promote.lua: move scheduled and retrying jobs of one queue whose time has come to pending.
-- KEYS: 1 scheduled (zset run_at), 2 retrying (zset run_at), 3 pending (list), 4 state,
--       5 notify
-- ARGV: 1 now|'', 2 queue, 3 limit
-- Returns: {how many moved, batch moves {batch id, job id, "pending:queue"}}
local K_SCHEDULED = KEYS[1]
local K_RETRYING = KEYS[2]
local K_PENDING = KEYS[3]
local K_STATE = KEYS[4]
local K_NOTIFY = KEYS[5]
local limit = tonumber(ARGV[3])
local moved, moves = 0, {}
for _, K_FROM in ipairs({K_SCHEDULED, K_RETRYING}) do
  if moved < limit then
    local ids = redis.call('ZRANGEBYSCORE', K_FROM, '-inf', NOW, 'LIMIT', 0, limit - moved)
    for _, id in ipairs(ids) do
      redis.call('ZREM', K_FROM, id)
      local f, events = load(K_STATE, id)
      if f and (f[S] == 'scheduled' or f[S] == 'retrying') then
        f[S] = 'pending'
        f[PT] = NOWS
        f[W] = ''
        save(K_STATE, id, f, events .. event_line('enqueued', 'pending', f))
        redis.call('LPUSH', K_PENDING, id)
        note_batch(moves, f, id, 'pending')
        moved = moved + 1
      end
    end
  end
end
notify(K_NOTIFY, moved)
return {moved, moves}
