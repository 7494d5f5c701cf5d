-- bury.lua: with a broker, jobs of one queue whose message the broker gave up on (its
-- delivery limit: a job that kills every worker it reaches) end dead with the reason
-- (Outbox.bury). Only pending and active jobs move; an active one's lease token is cleared, so
-- a late ack of its holder is refused, and what it holds of flow control is given back.
--- @include "_clock"
--- @include "_fields"
--- @include "_record"
--- @include "_events"
--- @include "_counts"
--- @include "_moves"
--- @include "_flow"
--- @include "_unindex"
--- @key jobs       static JSON, read for flow control
--- @key state
--- @key parked
--- @key published
--- @key scheduled
--- @key active
--- @key retrying
--- @key succeeded
--- @key failed
--- @key dead
--- @key cancelled
--- @key waiting
--- @key aggregating
--- @key groups
--- @key group_due
--- @key group_members
--- @key meta
--- @key history    hash: the ring of per-minute outcome counts (_counts.lua)
--- @key messages
--- @key flow
--- @key lineup     zset: lined pending jobs (_lineup.lua)
--- @key lined      hash id -> its lineup entry
--- @key aging      zset id -> when aging raises it next
-- ARGV: 1 now|'', 2 queue, 3 reason, then job ids
-- Returns: {how many moved, batch moves}
local moved, moves, reason = 0, {}, ARGV[3]
for i = 4, #ARGV do
  local id = ARGV[i]
  local f, events = load(K_STATE, id)
  if f and (f[F_STATE] == 'pending' or f[F_STATE] == 'active') then
    local was_active = f[F_STATE] == 'active'
    unindex(f[F_STATE], id, f)
    local fl = flow_of(K_JOBS, id, f)
    if fl then flow_release(K_FLOW, id, fl, was_active, true) end
    f[F_STATE] = 'dead'
    f[F_FINISHED_AT] = NOWS
    f[F_TOKEN] = ''
    f[F_LEASE_EXPIRES] = ''
    redis.call('ZADD', K_DEAD, NOW, id)
    count('d', f[F_NAME])
    redis.call('HSET', K_MESSAGES, id, reason)
    save(K_STATE, id, f, events .. event_line('dead', 'dead', f, reason))
    note_batch(moves, f, id, 'dead')
    moved = moved + 1
  end
end
flush_counts(K_META)
flush_stale()
return {moved, moves}
