-- trim.lua: delete finished jobs of one queue past retention, and the oldest dead jobs past
-- the dead set's size limit.
--- @include "_clock"
--- @include "_util"
--- @include "_durable"
--- @key jobs
--- @key state
--- @key succeeded
--- @key failed
--- @key dead
--- @key cancelled
--- @key results
--- @key messages
--- @key unique     hash unique key -> "expiry|job id"
--- @key steps
--- @key waits
--- @key inbox
--- @key listeners
-- ARGV: 1 now|'', 2 queue, 3 succeeded seconds, 4 failed seconds, 5 dead seconds,
--       6 dead max, 7 limit
-- Returns: how many jobs were deleted
local limit = tonumber(ARGV[7])
local deleted = 0

-- A unique lock still naming a trimmed job is stale once its unique_for has passed.
local function unlock(id)
  local static = redis.call('HGET', K_JOBS, id)
  if not static or not string.find(static, '"unique_key"', 1, true) then return end
  local ok, decoded = pcall(cjson.decode, static)  -- a damaged record holds no lock we know
  if not ok or type(decoded) ~= 'table' or type(decoded.fl) ~= 'table' then return end
  local ukey = decoded.fl.unique_key
  if type(ukey) ~= 'string' then return end
  local held = redis.call('HGET', K_UNIQUE, ukey)
  if held then
    local sep = string.find(held, '|', 1, true)
    if sep and string.sub(held, sep + 1) == id and num(string.sub(held, 1, sep - 1)) <= NOW then
      redis.call('HDEL', K_UNIQUE, ukey)
    end
  end
end

local function drop(K_INDEX, ids)
  for _, id in ipairs(ids) do
    unlock(id)
    redis.call('ZREM', K_INDEX, id)
    redis.call('HDEL', K_JOBS, id)
    redis.call('HDEL', K_STATE, id)
    redis.call('HDEL', K_RESULTS, id)
    redis.call('HDEL', K_MESSAGES, id)
    durable_forget(id)
    deleted = deleted + 1
  end
end

local function older(K_INDEX, seconds)
  if deleted >= limit then return end
  drop(K_INDEX, redis.call('ZRANGEBYSCORE', K_INDEX, '-inf', '(' .. (NOW - seconds),
    'LIMIT', 0, limit - deleted))
end

older(K_SUCCEEDED, tonumber(ARGV[3]))
older(K_FAILED, tonumber(ARGV[4]))
older(K_CANCELLED, tonumber(ARGV[4]))
older(K_DEAD, tonumber(ARGV[5]))
local extra = redis.call('ZCARD', K_DEAD) - tonumber(ARGV[6])
if extra > 0 and deleted < limit then
  drop(K_DEAD, redis.call('ZRANGE', K_DEAD, 0, math.min(extra, limit - deleted) - 1))
end
return deleted
