-- kill.lua: move waiting jobs (scheduled, pending, retrying) of one queue to dead by hand.
-- KEYS: 1 jobs, 2 state, 3 pending, 4 scheduled, 5 active, 6 retrying, 7 succeeded,
--       8 failed, 9 dead, 10 cancelled, 11 meta, 12 notify, 13 results, 14 messages,
--       15 parked, 16 flow
-- ARGV: 1 now|'', 2 queue, then job ids
-- Returns: {how many moved, batch moves}
local K_JOBS = KEYS[1]
local K_STATE = KEYS[2]
local K_PENDING = KEYS[3]
local K_SCHEDULED = KEYS[4]
local K_ACTIVE = KEYS[5]
local K_RETRYING = KEYS[6]
local K_SUCCEEDED = KEYS[7]
local K_FAILED = KEYS[8]
local K_DEAD = KEYS[9]
local K_CANCELLED = KEYS[10]
local K_META = KEYS[11]
local K_NOTIFY = KEYS[12]
local K_RESULTS = KEYS[13]
local K_MESSAGES = KEYS[14]
local K_PARKED = KEYS[15]
local K_FLOW = KEYS[16]
local INDEX = {pending = K_PENDING, scheduled = K_SCHEDULED, active = K_ACTIVE,
  retrying = K_RETRYING, succeeded = K_SUCCEEDED, failed = K_FAILED, dead = K_DEAD,
  cancelled = K_CANCELLED}
local moves = {}
local moved = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local f, events = load(K_STATE, id)
  if f and WAITING[f[S]] then
    local K_FROM = INDEX[f[S]]
    unindex(K_FROM, K_PARKED, f[S], id)
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
return {moved, moves}
