-- delete.lua: delete jobs of one queue that are not active (record, events, index entry).
--- @include "_fields"
--- @include "_record"
--- @include "_moves"
--- @include "_flow"
--- @include "_unindex"
--- @include "_durable"
--- @key jobs
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
--- @key results
--- @key messages
--- @key flow
--- @key lineup     zset: lined pending jobs (_lineup.lua)
--- @key lined      hash id -> its lineup entry
--- @key aging      zset id -> when aging raises it next
--- @key steps
--- @key waits
--- @key inbox
--- @key listeners
-- ARGV: 1 now|'', 2 queue, then job ids
-- Returns: {how many deleted, batch moves with state "deleted"}
local deleted, moves = 0, {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local f = load(K_STATE, id)
  if f and f[F_STATE] ~= 'active' then
    unindex(f[F_STATE], id, f)
    local fl = flow_of(K_JOBS, id, f)
    if fl then flow_release(K_FLOW, id, fl, false, true) end
    redis.call('HDEL', K_JOBS, id)
    redis.call('HDEL', K_STATE, id)
    redis.call('HDEL', K_RESULTS, id)
    redis.call('HDEL', K_MESSAGES, id)
    durable_forget(id)
    note_batch(moves, f, id, 'deleted')
    deleted = deleted + 1
  end
end
flush_stale()
return {deleted, moves}
