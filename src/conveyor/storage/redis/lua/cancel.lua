-- cancel.lua: cancel jobs of one queue. Waiting jobs (pending, scheduled, retrying) become
-- cancelled; an active job gets a cancellation request its worker sees at its next heartbeat.
-- KEYS: 1 jobs, 2 state, 3 pending, 4 scheduled, 5 active, 6 retrying, 7 succeeded,
--       8 failed, 9 dead, 10 cancelled, 11 meta, 12 notify, 13 results, 14 messages,
--       15 parked, 16 flow
-- ARGV: 1 now|'', 2 queue, then job ids
-- Returns: {resulting state per id ('' when no such job), batch moves}
-- (the K_* names, INDEX and moves come from _admin.lua)
-- Records are read with one HMGET and written with one HSET and one ZADD per call.
local out, ids, states, cancelled = {}, {}, {}, {}
for i = 3, #ARGV do ids[#ids + 1] = ARGV[i] end
local raws = {}
if #ids > 0 then raws = redis.call('HMGET', K_STATE, unpack(ids)) end
for k, id in ipairs(ids) do
  local f, events = nil, nil
  if raws[k] then f, events = parse(raws[k]) end
  if not f then
    out[#out + 1] = ''
  elseif stoppable(f[S]) then
    stale = stale + unindex(INDEX, K_PARKED, f[S], id)
    local fl = flow_of(K_JOBS, id, f)
    if fl then flow_release(K_FLOW, id, fl, false, true) end
    f[S] = 'cancelled'
    f[FA] = NOWS
    cancelled[#cancelled + 1] = NOW
    cancelled[#cancelled + 1] = id
    states[#states + 1] = id
    states[#states + 1] = pack(f, events .. event_line('cancelled', 'cancelled', f))
    note_batch(moves, f, id, 'cancelled')
    out[#out + 1] = 'cancelled'
  elseif f[S] == 'active' then
    if f[CR] == '' then
      f[CR] = '1'
      states[#states + 1] = id
      states[#states + 1] = pack(f, events .. event_line('cancel_requested', 'active', f))
    end
    out[#out + 1] = 'active'
  else
    out[#out + 1] = f[S]
  end
end
bulk('HSET', K_STATE, states)
bulk('ZADD', K_CANCELLED, cancelled)
flush_stale()
return {out, moves}
