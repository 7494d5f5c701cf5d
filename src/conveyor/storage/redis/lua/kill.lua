-- kill.lua: move waiting jobs (scheduled, pending, retrying) of one queue to dead by hand.
-- KEYS: 1 jobs, 2 events, 3 pending, 4 scheduled, 5 active, 6 retrying, 7 succeeded,
--       8 failed, 9 dead, 10 cancelled, 11 meta, 12 notify
-- ARGV: 1 now|'', then job ids
-- Returns: {how many moved, batch moves}
local K_JOBS = KEYS[1]
local K_EVENTS = KEYS[2]
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
local INDEX = {pending = K_PENDING, scheduled = K_SCHEDULED, active = K_ACTIVE,
  retrying = K_RETRYING, succeeded = K_SUCCEEDED, failed = K_FAILED, dead = K_DEAD,
  cancelled = K_CANCELLED}
local WAITING = {pending = true, scheduled = true, retrying = true}
local moves = {}
local moved = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local job = load(K_JOBS, id)
  if job and WAITING[job.s] then
    unindex(INDEX[job.s], job.s, id)
    job.s = 'dead'
    job.fa = NOW
    redis.call('ZADD', K_DEAD, NOW, id)
    count(K_META, 'd', job.n)
    save(K_JOBS, id, job)
    append_events(K_EVENTS, id, event_line('killed', 'dead', job))
    note_batch(moves, job, id, 'dead')
    moved = moved + 1
  end
end
return {moved, moves}
