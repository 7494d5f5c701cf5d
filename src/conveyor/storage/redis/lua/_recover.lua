-- _recover.lua: the recovery of one active job whose attempt was lost, shared by reclaim.lua
-- (the lease expired) and release.lua (a supervisor saw the worker process die).
-- The job goes back to pending ("recovered", not an error attempt), or to dead after more than
-- max_recoveries (ARGV[3]) recoveries; a job whose cancellation was requested ends cancelled
-- instead: it must never run again. Its lease token is cleared, so the old holder's late writes
-- are refused. `done`, `pushed` and `moves` collect what the calling script returns.
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @include "_record"
--- @include "_events"
--- @include "_counts"
--- @include "_moves"
--- @include "_flow"
--- @include "_lineup"
--- @needs-keys active pending state dead meta messages jobs flow cancelled lineup lined aging
local max_recoveries = tonumber(ARGV[3])
local done, pushed, moves = 0, 0, {}

-- why: what lost the attempt ('lease expired', 'worker process died'), for the messages.
local function recover(id, f, events, why)
  redis.call('ZREM', K_ACTIVE, id)
  local r = num(f[F_RECOVERIES]) + 1
  f[F_RECOVERIES] = tostring(r)
  f[F_TOKEN] = ''
  f[F_LEASE_EXPIRES] = ''
  local cancel = f[F_CANCEL_REQUESTED] ~= ''
  local fl = flow_of(K_JOBS, id, f)
  if fl then flow_release(K_FLOW, id, fl, true, cancel or r > max_recoveries) end
  if cancel then
    local msg = 'cancelled: ' .. why
    f[F_STATE] = 'cancelled'
    f[F_FINISHED_AT] = NOWS
    redis.call('ZADD', K_CANCELLED, NOW, id)
    redis.call('HSET', K_MESSAGES, id, msg)
    events = events .. event_line('cancelled', 'cancelled', f, msg)
  elseif r > max_recoveries then
    local msg = 'recovered ' .. r .. ' times (poison job?)'
    f[F_STATE] = 'dead'
    f[F_FINISHED_AT] = NOWS
    redis.call('ZADD', K_DEAD, NOW, id)
    redis.call('HSET', K_MESSAGES, id, msg)
    count('d', f[F_NAME])
    events = events .. event_line('dead', 'dead', f, msg)
  else
    f[F_STATE] = 'pending'
    f[F_PENDING_SINCE] = NOWS
    if lined(f) then line_push(id) else redis.call('RPUSH', K_PENDING, id) end
    pushed = pushed + 1
    events = events .. event_line('recovered', 'pending', f, why .. '; put back to pending')
    f[F_WORKER] = ''
  end
  save(K_STATE, id, f, events)
  note_batch(moves, f, id, f[F_STATE])
  done = done + 1
end
