-- breaker.lua: close a breaker key of one queue by hand (Storage.close_breaker): its record
-- goes, failure log and all, so its jobs lease as usual at once (docs/flow-control.md).
--- @include "_util"
--- @key breakers      hash: breaker key -> its record (_breakers.lua)
--- @key breaker_ends  zset: closed breaker key -> when its failure log runs out
--- @key notify        list: wake-up tokens for idle workers
-- ARGV: 1 now|'', 2 the breaker key
-- Returns: 1 when the key was open or half-open here, else 0.
local raw = redis.call('HGET', K_BREAKERS, ARGV[2])
redis.call('HDEL', K_BREAKERS, ARGV[2])
redis.call('ZREM', K_BREAKER_ENDS, ARGV[2])
local state = raw and string.match(raw, '^[^\t]*')
if state == 'open' or state == 'half_open' then
  notify(K_NOTIFY, 1)
  return 1
end
return 0
