-- requeue.lua: retry jobs of one queue by hand: dead, failed, cancelled or retrying jobs go
-- back to pending now with a "retried" event.
-- KEYS: 1 jobs, 2 state, 3 pending, 4 scheduled, 5 active, 6 retrying, 7 succeeded,
--       8 failed, 9 dead, 10 cancelled, 11 meta, 12 notify, 13 results, 14 messages,
--       15 parked, 16 flow
-- ARGV: 1 now|'', 2 queue, then job ids
-- Returns: {how many moved, batch moves}
-- (the K_* names, INDEX and moves come from _admin.lua)
local AGAIN = {dead = true, failed = true, cancelled = true, retrying = true}
local moved = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local f, events = load(K_STATE, id)
  if f and AGAIN[f[S]] then
    stale = stale + unindex(INDEX, K_PARKED, f[S], id)
    f[S] = 'pending'
    f[PT] = NOWS
    f[FA] = ''
    f[CR] = ''
    f[W] = ''
    redis.call('LPUSH', K_PENDING, id)
    save(K_STATE, id, f, events .. event_line('retried', 'pending', f))
    note_batch(moves, f, id, 'pending')
    moved = moved + 1
  end
end
flush_stale()
notify(K_NOTIFY, moved)
return {moved, moves}
