-- release.lua: a supervisor saw worker process ARGV[4] die: recover the jobs of one queue it
-- held (as reclaim.lua does once their leases expire: _recover.lua), a page of the queue's
-- active jobs per call, walked by lease expiry. The dead worker's entries never move (nobody
-- extends them), and the walk goes by score, not rank, so jobs others ack meanwhile shift
-- nothing; a page ends with the whole group of jobs sharing its last expiry (one dequeue).
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
-- ARGV: 1 now|'', 2 queue, 3 max_recoveries, 4 worker id, 5 lowest expiry to look at
--       ('-inf', or '(' .. a score: above it), 6 page size
-- Returns: {how many recovered or buried, batch moves, next ARGV[5]|'' (walk done)}
local worker = ARGV[4]
local page = redis.call('ZRANGEBYSCORE', K_ACTIVE, ARGV[5], '+inf', 'WITHSCORES', 'LIMIT', 0,
  tonumber(ARGV[6]))
local ids, last = {}, nil
for i = 1, #page, 2 do ids[#ids + 1] = page[i] end
if #ids == tonumber(ARGV[6]) then
  -- The page may have cut a group of equal expiries: end it with the whole group instead.
  last = page[#page]
  ids = {}
  for i = 1, #page, 2 do if page[i + 1] ~= last then ids[#ids + 1] = page[i] end end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', K_ACTIVE, last, last)) do ids[#ids + 1] = id end
end
for _, id in ipairs(ids) do
  local f, events = load(K_STATE, id)
  if f and f[F_STATE] == 'active' and f[F_WORKER] == worker then
    recover(id, f, events, 'worker process died')
  end
end
flush_counts(K_META)
notify(K_NOTIFY, pushed)
local nxt = ''
if last then nxt = '(' .. last end
return {done, moves, nxt}
