-- _lineup.lua: a queue's lineup on Redis (storage/lineup.py, docs/scheduling.md).
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @include "_flow"
--- @needs-keys jobs meta lineup lined aging
-- A job with a priority, aging, a fair key or a cost above one is "lined" (its state line's
-- F_FLOW_CONTROLLED is 'l', codec.py): while pending it waits in K_LINEUP, not in the pending
-- list. K_LINEUP is a zset, every score 0, ordered by member bytes:
--   <100 - priority, 3 digits><fair key>\0<arrival, 15 digits>\0<id>
-- so the highest priority comes first; within it the jobs without a fair key (a key is never
-- empty and holds no control character: "\0" sorts before it), then each key in byte order,
-- each in arrival order (the meta counter 'lineseq'). K_LINED holds each job's member (its
-- priority now, raised by aging), K_AGING when aging raises it next. dequeue.lua walks it.
local PLAIN = '100'  -- the band of priority 0: the plain jobs' (pending list, parked zset)

local function lined(f) return f[F_FLOW_CONTROLLED] == 'l' end

local function band_of(priority) return string.format('%03d', 100 - priority) end

-- The fair key and the id of a member.
local function member_key(m)
  return string.sub(m, 4, string.find(m, '\0', 4, true) - 1)
end
local function member_id(m)
  return string.sub(m, string.find(m, '\0', 4, true) + 17)
end

-- A lined job's flow settings (its static JSON's "fl"); {} when they cannot be read.
local function line_fl(id, static)
  local ok, decoded = pcall(cjson.decode, static or redis.call('HGET', K_JOBS, id) or '')
  if ok and type(decoded) == 'table' and type(decoded.fl) == 'table' then return decoded.fl end
  return {}
end

-- Put a lined job that became pending in the lineup, after every job of its key there, at
-- its declared priority; aging counts from now.
local function line_push(id, static)
  local fl = line_fl(id, static)
  local priority = math.max(-100, math.min(100, math.floor(num(fl.priority))))
  local key = type(fl.fair_key) == 'string' and fl.fair_key or ''
  local seq = redis.call('HINCRBY', K_META, 'lineseq', 1)
  local member = band_of(priority) .. key .. '\0' .. string.format('%015d', seq) .. '\0' .. id
  redis.call('ZADD', K_LINEUP, 0, member)
  redis.call('HSET', K_LINED, id, member)
  local aging = num(fl.aging)
  if aging > 0 and priority < 100 then redis.call('ZADD', K_AGING, NOW + aging, id) end
end

-- A pending job leaves the lineup (leased, published, cancelled, deleted); false when it
-- was not in it.
local function unline(id)
  local member = redis.call('HGET', K_LINED, id)
  if not member then return false end
  redis.call('ZREM', K_LINEUP, member)
  redis.call('HDEL', K_LINED, id)
  redis.call('ZREM', K_AGING, id)
  return true
end

-- Aging (storage/lineup.py's `aged`): up to `limit` jobs whose time came gain one point of
-- priority per `aging` seconds since, up to 100, where they stop aging; each keeps its
-- arrival within its key.
local function line_age(limit)
  local due = redis.call('ZRANGEBYSCORE', K_AGING, '-inf', NOW, 'WITHSCORES', 'LIMIT', 0, limit)
  for i = 1, #due, 2 do
    local id, at = due[i], tonumber(due[i + 1])
    local member = redis.call('HGET', K_LINED, id)
    local aging = member and num(line_fl(id).aging) or 0
    if aging <= 0 then
      redis.call('ZREM', K_AGING, id)
    else
      local steps = math.floor((NOW - at) / aging) + 1
      local priority = math.min(100, 100 - tonumber(string.sub(member, 1, 3)) + steps)
      local moved = band_of(priority) .. string.sub(member, 4)
      redis.call('ZREM', K_LINEUP, member)
      redis.call('ZADD', K_LINEUP, 0, moved)
      redis.call('HSET', K_LINED, id, moved)
      if priority >= 100 then
        redis.call('ZREM', K_AGING, id)
      else
        redis.call('ZADD', K_AGING, at + steps * aging, id)
      end
    end
  end
end
