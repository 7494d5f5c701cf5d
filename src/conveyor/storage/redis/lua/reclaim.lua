-- reclaim.lua: put active jobs of one queue whose lease expired back to pending ("recovered",
-- not an error attempt), or to dead after more than max_recoveries recoveries. Also scans a
-- slice of the job states for active jobs that lost their lease entry (eviction, restore).
-- A job whose cancellation was requested ends cancelled instead: it must never run again.
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @include "_record"
--- @include "_events"
--- @include "_counts"
--- @include "_moves"
--- @include "_flow"
--- @key active     zset lease expiry
--- @key pending
--- @key state
--- @key dead
--- @key meta
--- @key notify
--- @key messages
--- @key jobs       static JSON, read for flow control
--- @key flow       hash
--- @key cancelled  zset
-- ARGV: 1 now|'', 2 queue, 3 max_recoveries, 4 limit, 5 scan cursor|'' (no scan),
--       6 scan count
-- Returns: {how many recovered or buried, batch moves, next scan cursor|''}
local max_recoveries = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local done, pushed, moves = 0, 0, {}

local function recover(id, f, events)
  redis.call('ZREM', K_ACTIVE, id)
  local r = num(f[F_RECOVERIES]) + 1
  f[F_RECOVERIES] = tostring(r)
  f[F_TOKEN] = ''
  f[F_LEASE_EXPIRES] = ''
  local cancel = f[F_CANCEL_REQUESTED] ~= ''
  local fl = flow_of(K_JOBS, id, f)
  if fl then flow_release(K_FLOW, id, fl, true, cancel or r > max_recoveries) end
  if cancel then
    local msg = 'cancelled: lease expired'
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
    redis.call('RPUSH', K_PENDING, id)
    pushed = pushed + 1
    events = events .. event_line('recovered', 'pending', f, 'lease expired; put back to pending')
    f[F_WORKER] = ''
  end
  save(K_STATE, id, f, events)
  note_batch(moves, f, id, f[F_STATE])
  done = done + 1
end

for _, id in ipairs(redis.call('ZRANGEBYSCORE', K_ACTIVE, '-inf', NOW, 'LIMIT', 0, limit)) do
  local f, events = load(K_STATE, id)
  if f and f[F_STATE] == 'active' then recover(id, f, events) else redis.call('ZREM', K_ACTIVE, id) end
end

local next_cursor = ''
if ARGV[5] ~= '' then
  local page = redis.call('HSCAN', K_STATE, ARGV[5], 'COUNT', tonumber(ARGV[6]))
  next_cursor = page[1]
  local entries = page[2]
  for i = 1, #entries, 2 do
    local id = entries[i]
    if string.sub(entries[i + 1], 1, 7) == 'active\t' and not redis.call('ZSCORE', K_ACTIVE, id) then
      local f, events = parse(entries[i + 1])
      local expiry = num(f[F_LEASE_EXPIRES])  -- a damaged expiry reads 0: recovered now
      if expiry <= NOW then recover(id, f, events) else
        redis.call('ZADD', K_ACTIVE, expiry, id) end
    end
  end
end
flush_counts(K_META)
notify(K_NOTIFY, pushed)
return {done, moves, next_cursor}
