-- _rates.lua: the sliding log of start times behind rate limits.
--- @include "_clock"
-- A job of rate key K may start at NOW while fewer than its rate_limit jobs of K started in
-- (NOW - rate_period, NOW] -- the rule memory and SQLite apply, with the same floating-point
-- comparison (start <= NOW - period is out).
-- The log of a queue is one zset, K_RATES, every score 0 so it is ordered by member bytes:
--   <byte length of K>:<K> <start time as 8 bytes, big-endian IEEE double> <unique tag>
-- The length prefix keeps each key's members contiguous (no key's prefix starts another's),
-- and big-endian doubles of non-negative times sort as the times do, so one ZREMRANGEBYLEX
-- drops a key's starts that left the window and one ZLEXCOUNT counts the rest, both exact
-- and O(log n). K_RATE_ENDS (zset rate key -> when its newest start leaves the window) lets
-- dequeue forget the log of a key no longer used (rate_forget), so the log stays bounded:
-- at most rate_limit members per key started within the last period (and a second).
local RATE_ALL = '\128'  -- above the first byte of any non-negative double: all of a key
local RATE_AT = '\255'  -- above any tag byte: all starts at or before a time
local function rate_prefix(key) return #key .. ':' .. key end
local function rate_before(prefix, t) return '(' .. prefix .. struct.pack('>d', t) .. RATE_AT end

local function rate_admits(K_RATES, key, limit, period)
  local prefix = rate_prefix(key)
  local cutoff = NOW - period
  if cutoff >= 0 then
    redis.call('ZREMRANGEBYLEX', K_RATES, '[' .. prefix, rate_before(prefix, cutoff))
  end
  return redis.call('ZLEXCOUNT', K_RATES, '[' .. prefix, '(' .. prefix .. RATE_ALL) < limit
end

local function rate_start(K_RATES, K_RATE_ENDS, key, period, tag)
  redis.call('ZADD', K_RATES, 0, rate_prefix(key) .. struct.pack('>d', NOW) .. tag)
  redis.call('ZADD', K_RATE_ENDS, 'GT', NOW + period, key)
end

-- Forget the logs of up to `limit` keys whose newest start left the window more than a second
-- ago (the second absorbs rounding in NOW + period; a log kept a little longer is harmless).
local function rate_forget(K_RATES, K_RATE_ENDS, limit)
  local idle = redis.call('ZRANGEBYSCORE', K_RATE_ENDS, '-inf', '(' .. (NOW - 1),
    'LIMIT', 0, limit)
  for _, key in ipairs(idle) do
    local prefix = rate_prefix(key)
    redis.call('ZREMRANGEBYLEX', K_RATES, '[' .. prefix, '(' .. prefix .. RATE_ALL)
    redis.call('ZREM', K_RATE_ENDS, key)
  end
end
