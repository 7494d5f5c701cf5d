-- requeue.lua: retry jobs of one queue by hand: dead, failed, cancelled or retrying jobs go
-- back to pending now with a "retried" event (errors and recoveries are reset).
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
local AGAIN = {dead = true, failed = true, cancelled = true, retrying = true}
local moved = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local job = load(K_JOBS, id)
  if job and AGAIN[job.s] then
    unindex(INDEX[job.s], job.s, id)
    job.s = 'pending'
    job.pt = NOW
    job.e = 0
    job.r = 0
    job.fa = nil
    job.cr = nil
    redis.call('LPUSH', K_PENDING, id)
    save(K_JOBS, id, job)
    append_events(K_EVENTS, id, event_line('retried', 'pending', job))
    note_batch(moves, job, id, 'pending')
    moved = moved + 1
  end
end
notify(K_NOTIFY, moved)
return {moved, moves}
