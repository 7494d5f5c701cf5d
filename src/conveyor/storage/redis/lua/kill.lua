-- kill.lua: move waiting jobs (scheduled, pending, retrying) of one queue to dead by hand.
-- KEYS: 1 jobs, 2 state, 3 pending, 4 scheduled, 5 active, 6 retrying, 7 succeeded,
--       8 failed, 9 dead, 10 cancelled, 11 meta, 12 notify, 13 results, 14 messages,
--       15 parked, 16 flow
-- ARGV: 1 now|'', 2 queue, then job ids
-- Returns: {how many moved, batch moves}
-- (the K_* names, INDEX and moves come from _admin.lua)
local moved = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local f, events = load(K_STATE, id)
  if f and stoppable(f[S]) then
    stale = stale + unindex(INDEX, K_PARKED, f[S], id)
    local fl = flow_of(K_JOBS, id, f)
    if fl then flow_release(K_FLOW, id, fl, false, true) end
    f[S] = 'dead'
    f[FA] = NOWS
    redis.call('ZADD', K_DEAD, NOW, id)
    count('d', f[N])
    save(K_STATE, id, f, events .. event_line('killed', 'dead', f))
    note_batch(moves, f, id, 'dead')
    moved = moved + 1
  end
end
flush_counts(K_META)
flush_stale()
return {moved, moves}
