-- cancel.lua: cancel jobs of one queue. Waiting jobs (pending, scheduled, retrying) become
-- cancelled; an active job gets a cancellation request its worker sees at its next heartbeat.
-- KEYS: 1 jobs, 2 state, 3 pending, 4 scheduled, 5 active, 6 retrying, 7 succeeded,
--       8 failed, 9 dead, 10 cancelled, 11 meta, 12 notify, 13 results, 14 messages,
--       15 parked, 16 flow
-- ARGV: 1 now|'', 2 queue, then job ids
-- Returns: {resulting state per id ('' when no such job), batch moves}
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
local out = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local f, events = load(K_STATE, id)
  if not f then
    out[#out + 1] = ''
  elseif WAITING[f[S]] then
    local K_FROM = INDEX[f[S]]
    unindex(K_FROM, K_PARKED, f[S], id)
    local fl = flow_of(K_JOBS, id, f)
    if fl then flow_release(K_FLOW, id, fl, false, true) end
    f[S] = 'cancelled'
    f[FA] = NOWS
    redis.call('ZADD', K_CANCELLED, NOW, id)
    save(K_STATE, id, f, events .. event_line('cancelled', 'cancelled', f))
    note_batch(moves, f, id, 'cancelled')
    out[#out + 1] = 'cancelled'
  elseif f[S] == 'active' then
    if f[CR] == '' then
      f[CR] = '1'
      save(K_STATE, id, f, events .. event_line('cancel_requested', 'active', f))
    end
    out[#out + 1] = 'active'
  else
    out[#out + 1] = f[S]
  end
end
return {out, moves}
