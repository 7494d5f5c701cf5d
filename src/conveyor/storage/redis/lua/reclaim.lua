-- reclaim.lua: put active jobs of one queue whose lease expired back to pending ("recovered",
-- not an error attempt), or to dead after more than max_recoveries recoveries. Also scans a
-- slice of the job states for active jobs that lost their lease entry (eviction, restore).
-- A job whose cancellation was requested ends cancelled instead: it must never run again.
-- The recovery itself is _recover.lua's, shared with release.lua.
--- @include "_recover"
--- @key active     zset lease expiry
--- @key pending
--- @key state
--- @key dead
--- @key meta
--- @key history    hash: the ring of per-minute outcome counts (_counts.lua)
--- @key notify
--- @key messages
--- @key jobs       static JSON, read for flow control
--- @key flow       hash
--- @key cancelled  zset
--- @key lineup     zset: lined pending jobs (_lineup.lua)
--- @key lined      hash id -> its lineup entry
--- @key aging      zset id -> when aging raises it next
-- ARGV: 1 now|'', 2 queue, 3 max_recoveries, 4 limit, 5 scan cursor|'' (no scan),
--       6 scan count
-- Returns: {how many recovered or buried, batch moves, next scan cursor|''}
local limit = tonumber(ARGV[4])

for _, id in ipairs(redis.call('ZRANGEBYSCORE', K_ACTIVE, '-inf', NOW, 'LIMIT', 0, limit)) do
  local f, events = load(K_STATE, id)
  if f and f[F_STATE] == 'active' then recover(id, f, events, 'lease expired')
  else redis.call('ZREM', K_ACTIVE, id) end
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
      if expiry <= NOW then recover(id, f, events, 'lease expired') else
        redis.call('ZADD', K_ACTIVE, expiry, id) end
    end
  end
end
flush_counts(K_META)
notify(K_NOTIFY, pushed)
return {done, moves, next_cursor}
