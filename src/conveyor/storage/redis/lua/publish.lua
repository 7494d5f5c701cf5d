-- publish.lua: with a broker, the pending jobs of one queue due to be published
-- (Outbox.publish_due, docs/design.md §7). A job handed out here leaves the pending list for
-- the published zset, scored with when it is due again should no worker start it by then (a
-- publish never confirmed, a message the broker lost); start.lua takes it out of there.
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @include "_record"
--- @include "_flow"
--- @include "_rates"
--- @include "_admit"
--- @include "_lineup"
--- @key pending    list
--- @key state      hash state line + events
--- @key jobs       hash static JSON, read for flow control
--- @key meta       hash: paused flag, counters
--- @key parked     zset: pending jobs held back by flow control (or a pause), oldest first
--- @key flow       hash: concurrency counts, order holders
--- @key rates      zset: the sliding log of start times per rate key
--- @key published  zset: job id -> when it is due to be published again
--- @key lineup     zset: lined pending jobs (_lineup.lua)
--- @key lined      hash id -> its lineup entry
--- @key aging      zset id -> when aging raises it next
--- @key active     zset lease expiry (a breaker's probe running: _breakers.lua)
--- @key breakers   hash: breaker key -> its record
-- ARGV: 1 now|'', 2 queue, 3 count, 4 republish after (seconds)
-- Returns: job ids, oldest first: published ones due again, parked ones that may now run,
-- the oldest of the pending list, then lined ones in their lineup's order (the broker
-- orders the deliveries: docs/scheduling.md). An id whose record is gone or no longer pending is
-- dropped on the way (a damaged record is handed out: start.lua leases it with the damage).
local PARKED_SCAN = 200
if redis.call('HEXISTS', K_META, 'paused') == 1 then return {} end
local want = tonumber(ARGV[3])
local again = NOW + tonumber(ARGV[4])
local out, stamps, dropped, seen = {}, {}, 0, {}

local function pending(raw)
  if not raw then return false end
  local f = parse(raw)
  return not (STATES[f[F_STATE]] and f[F_STATE] ~= 'pending'), f
end

local function take(id)
  seen[id] = true
  out[#out + 1] = id
  stamps[#stamps + 1] = again
  stamps[#stamps + 1] = id
end

-- Published but never started within the bound: publish again (or forget a finished one).
local overdue = redis.call('ZRANGEBYSCORE', K_PUBLISHED, '-inf', NOW, 'LIMIT', 0, want)
if #overdue > 0 then
  local raws = redis.call('HMGET', K_STATE, unpack(overdue))
  for k, id in ipairs(overdue) do
    if pending(raws[k]) then take(id) else redis.call('ZREM', K_PUBLISHED, id) end
  end
end
-- Parked by start.lua: due once its limits would let it run.
local any_parked = false
if #out < want then
  local parked = redis.call('ZRANGE', K_PARKED, 0, PARKED_SCAN - 1)
  any_parked = #parked > 0
  local raws = #parked > 0 and redis.call('HMGET', K_STATE, unpack(parked)) or {}
  for k, id in ipairs(parked) do
    if #out >= want then break end
    local ok, f = pending(raws[k])
    if not ok or seen[id] then
      redis.call('ZREM', K_PARKED, id)
    else
      local fl = f and flow_of(K_JOBS, id, f)
      -- a key that breaks the key rule: due, so that its start ends it (start.lua)
      if not fl or flow_broken(fl) or flow_would_admit(K_FLOW, K_RATES, id, fl) then
        redis.call('ZREM', K_PARKED, id)
        take(id)
      end
    end
  end
end
-- The oldest of the pending list. A delivery start.lua parked before its job was ever
-- published left the job's entry here too: the parked one speaks for it (due once admitted).
while #out < want do
  local ids = redis.call('RPOP', K_PENDING, want - #out)
  if not ids then break end
  local raws = redis.call('HMGET', K_STATE, unpack(ids))
  for k, id in ipairs(ids) do
    if seen[id] or not pending(raws[k]) then
      dropped = dropped + 1
    elseif not (any_parked and redis.call('ZSCORE', K_PARKED, id)) then
      take(id)
    end
  end
end
-- Then the lineup's, in its order: each leaves it for the published zset.
while #out < want do
  local members = redis.call('ZRANGE', K_LINEUP, 0, want - #out - 1)
  if #members == 0 then break end
  for _, m in ipairs(members) do
    local id = member_id(m)
    unline(id)
    if not seen[id] and pending(redis.call('HGET', K_STATE, id)) then take(id) end
  end
end
bulk('ZADD', K_PUBLISHED, stamps)
if dropped > 0 and redis.call('HINCRBY', K_META, 'stale', -dropped) < 0 then
  redis.call('HSET', K_META, 'stale', 0)
end
return out
