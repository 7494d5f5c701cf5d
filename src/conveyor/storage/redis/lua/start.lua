-- start.lua: with a broker, lease the jobs of one queue whose messages a worker received
-- (Outbox.start, docs/design.md §7), each as dequeue.lua would lease it, in the order given.
--- @include "_lease"
--- @include "_flow"
--- @include "_rates"
--- @include "_admit"
--- @include "_recover"
--- @key pending    list
--- @key active     zset lease expiry
--- @key jobs       hash static JSON
--- @key state      hash state line + events
--- @key meta       hash: paused flag, counters
--- @key history    hash: the ring of per-minute outcome counts (_counts.lua)
--- @key dead       zset finished_at
--- @key parked     zset: pending jobs held back by flow control (or a pause), oldest first
--- @key flow       hash: concurrency counts, order holders
--- @key messages   hash id -> the job's message
--- @key rates      zset: the sliding log of start times per rate key
--- @key rate_ends  zset: rate key -> when its log runs out
--- @key cancelled  zset
--- @key published  zset: job id -> when it is due to be published again
--- @key lineup     zset: lined pending jobs (_lineup.lua)
--- @key lined      hash id -> its lineup entry
--- @key aging      zset id -> when aging raises it next
--- @key breakers   hash: breaker key -> its record (_breakers.lua)
-- ARGV: 1 now|'', 2 queue, 3 worker id, 4 max recoveries, 5 lease seconds, 6 token prefix,
--       7 why a redelivered job is recovered (rules.REDELIVERED), then triples: job id, "1" if
--       the broker says it redelivered the message else "0", the message's id or ''.
-- Returns: {kinds, leased, batch moves}: a kind per triple ("started", "running", "skipped",
-- "parked", "foreign"), the leased jobs as dequeue.lua returns them (in the order of the "started"
-- kinds), and the batch moves.
-- A job active under a lease whose message comes redelivered is taken over at once, as a lease
-- expiry would take it (_recover.lua: "recovered", recoveries + 1, dead past the limit), then
-- leased here: its old holder's token no longer counts. Only the message that started the
-- current lease may do that: a lease started from a message has a token whose part before
-- "/queue" ends in '#' and the message's id, and an older message of a job published again is a duplicate ('running').
max_recoveries = tonumber(ARGV[4])  -- _recover.lua reads its own callers' ARGV[3]
local paused = redis.call('HEXISTS', K_META, 'paused') == 1
local kinds, seen, rate_seq = {}, {}, 0

local function park(id)
  redis.call('ZREM', K_PUBLISHED, id)
  if not redis.call('ZSCORE', K_PARKED, id) then
    redis.call('ZADD', K_PARKED, redis.call('HINCRBY', K_META, 'parkseq', 1), id)
  end
  return 'parked'
end

local function start(id, redelivered, message)
  local mark = message ~= '' and ('#' .. message) or nil
  if seen[id] then return 'running' end  -- a second message for it in this call
  seen[id] = true
  local f, events, bad = load(K_STATE, id)
  -- no job of this queue (its slot) has the id: another queue's or app's job, or none
  if not f then redis.call('ZREM', K_PUBLISHED, id) return 'foreign' end
  if f[F_STATE] == 'active' and not bad then
    if not redelivered then return 'running' end
    local head = string.match(f[F_TOKEN] or '', '^[^/]*')  -- the token before "/queue"
    if mark and string.sub(head, -#mark) ~= mark then return 'running' end
    recover(id, f, events, ARGV[7])
    if f[F_STATE] ~= 'pending' then return 'skipped' end
    -- the entry recover() just pushed: it starts here instead
    if lined(f) then unline(id) else redis.call('RPOP', K_PENDING) end
    f, events, bad = load(K_STATE, id)
  end
  local static = redis.call('HGET', K_JOBS, id)
  if STATES[f[F_STATE]] and f[F_STATE] ~= 'pending' then
    redis.call('ZREM', K_PUBLISHED, id)
    return 'skipped'
  end
  if not bad and not static then bad = 'job record missing' end
  if bad then  -- leased with the damage named: the worker acknowledges it dead with it
    redis.call('ZREM', K_PUBLISHED, id)
    redis.call('ZREM', K_PARKED, id)
    unline(id)
    lease(id, static, f, events, bad, mark)
    return 'started'
  end
  local deadline = tonumber(f[F_DEADLINE])
  if deadline and deadline < NOW then
    redis.call('ZREM', K_PUBLISHED, id)
    redis.call('ZREM', K_PARKED, id)
    unline(id)
    expire(id, f, events)
    return 'skipped'
  end
  if paused then return park(id) end
  local fl = flow_of(K_JOBS, id, f)
  local broken = fl and flow_broken(fl)
  if broken then
    redis.call('ZREM', K_PUBLISHED, id)
    redis.call('ZREM', K_PARKED, id)
    unline(id)
    expire(id, f, events, broken)
    return 'skipped'
  end
  rate_seq = rate_seq + 1
  local admitted, probe = true, nil
  if fl then
    admitted, probe = flow_admit(K_FLOW, K_RATES, K_RATE_ENDS, id, fl, ARGV[6] .. 'r' .. rate_seq)
  end
  if not admitted then return park(id) end
  redis.call('ZREM', K_PUBLISHED, id)
  redis.call('ZREM', K_PARKED, id)
  if lined(f) then unline(id) end  -- a plain job's start makes no extra call
  lease(id, static, f, events, nil, mark, probe)
  return 'started'
end

for i = 8, #ARGV, 3 do kinds[#kinds + 1] = start(ARGV[i], ARGV[i + 1] == '1', ARGV[i + 2]) end
flush_leases()
flush_counts(K_META)
-- A takeover's moves (active -> pending, _recover.lua) come before its lease's.
for _, move in ipairs(lease_moves) do moves[#moves + 1] = move end
return {kinds, out, moves}
