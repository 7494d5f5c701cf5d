-- _admin.lua: shared KEYS of the operator scripts (cancel, requeue, kill, delete), prepended
-- after _lib.lua by scripts.py; not a script by itself.
-- KEYS: 1 jobs, 2 state, 3 pending, 4 scheduled, 5 active, 6 retrying, 7 succeeded,
--       8 failed, 9 dead, 10 cancelled, 11 meta, 12 notify, 13 results, 14 messages,
--       15 parked, 16 flow
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
-- A record in no known state (damaged) can be cancelled, killed or deleted like a waiting job,
-- so that an operator can always get it out of the way.
local function stoppable(state) return WAITING[state] or not STATES[state] end
-- List entries left behind by unindex (see _lib.lua), counted once per call.
local stale = 0
local function flush_stale()
  if stale > 0 then redis.call('HINCRBY', K_META, 'stale', stale) end
end
