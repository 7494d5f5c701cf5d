-- delete.lua: delete jobs of one queue that are not active (record, events, index entry).
-- KEYS: 1 jobs, 2 state, 3 pending, 4 scheduled, 5 active, 6 retrying, 7 succeeded,
--       8 failed, 9 dead, 10 cancelled, 11 meta, 12 notify, 13 results, 14 messages,
--       15 parked, 16 flow
-- ARGV: 1 now|'', 2 queue, then job ids
-- Returns: {how many deleted, batch moves with state "deleted"}
-- (the K_* names, INDEX and moves come from _admin.lua)
local deleted = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local f = load(K_STATE, id)
  if f and f[S] ~= 'active' then
    stale = stale + unindex(INDEX, K_PARKED, f[S], id)
    local fl = flow_of(K_JOBS, id, f)
    if fl then flow_release(K_FLOW, id, fl, false, true) end
    redis.call('HDEL', K_JOBS, id)
    redis.call('HDEL', K_STATE, id)
    redis.call('HDEL', K_RESULTS, id)
    redis.call('HDEL', K_MESSAGES, id)
    note_batch(moves, f, id, 'deleted')
    deleted = deleted + 1
  end
end
flush_stale()
return {deleted, moves}
