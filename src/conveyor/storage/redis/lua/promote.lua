-- promote.lua: move scheduled and retrying jobs of one queue whose time has come to pending.
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @include "_record"
--- @include "_events"
--- @include "_moves"
--- @key scheduled  zset run_at
--- @key retrying   zset run_at
--- @key pending    list
--- @key state
--- @key notify
-- ARGV: 1 now|'', 2 queue, 3 limit
-- Returns: {how many moved, batch moves {batch id, job id, "pending:queue"}}
local limit = tonumber(ARGV[3])
local moved, moves = 0, {}
for _, K_FROM in ipairs({K_SCHEDULED, K_RETRYING}) do
  if moved < limit then
    local ids = redis.call('ZRANGEBYSCORE', K_FROM, '-inf', NOW, 'LIMIT', 0, limit - moved)
    for _, id in ipairs(ids) do
      redis.call('ZREM', K_FROM, id)
      local f, events = load(K_STATE, id)
      if f and (f[F_STATE] == 'scheduled' or f[F_STATE] == 'retrying') then
        f[F_STATE] = 'pending'
        f[F_PENDING_SINCE] = NOWS
        f[F_WORKER] = ''
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
