-- cancel.lua: cancel jobs of one queue. Waiting jobs (pending, scheduled, retrying) become
-- cancelled; an active job gets a cancellation request its worker sees at its next heartbeat.
-- KEYS: 1 jobs, 2 state, 3 pending, 4 scheduled, 5 active, 6 retrying, 7 succeeded,
--       8 failed, 9 dead, 10 cancelled, 11 meta, 12 notify, 13 results, 14 messages,
--       15 parked, 16 flow
-- ARGV: 1 now|'', 2 queue, then job ids
-- Returns: {resulting state per id ('' when no such job), batch moves}
-- (the K_* names, INDEX and moves come from _admin.lua)
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
    redis.call('HSET', K_MESSAGES, id, 'cancelled while waiting')
    save(K_STATE, id, f, events .. event_line('cancelled', 'cancelled', f,
      'cancelled while waiting'))
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
