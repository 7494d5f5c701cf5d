-- cancel.lua: cancel jobs of one queue. Waiting jobs (pending, scheduled, retrying) become
-- cancelled; an active job gets a cancellation request its worker sees at its next heartbeat.
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @include "_record"
--- @include "_events"
--- @include "_moves"
--- @include "_flow"
--- @include "_unindex"
--- @key jobs       static JSON, read for flow control
--- @key state
--- @key parked
--- @key published
--- @key scheduled
--- @key active
--- @key retrying
--- @key succeeded
--- @key failed
--- @key dead
--- @key cancelled
--- @key waiting
--- @key aggregating
--- @key groups
--- @key group_due
--- @key group_members
--- @key meta
--- @key messages
--- @key flow
--- @key lineup     zset: lined pending jobs (_lineup.lua)
--- @key lined      hash id -> its lineup entry
--- @key aging      zset id -> when aging raises it next
-- ARGV: 1 now|'', 2 queue, then job ids
-- Returns: {resulting state per id ('' when no such job), batch moves}
-- Records are read with one HMGET and written with one HSET (and one ZADD, one HSET of
-- messages) per call.
local out, ids, states, cancelled, messages, moves = {}, {}, {}, {}, {}, {}
for i = 3, #ARGV do ids[#ids + 1] = ARGV[i] end
local raws = {}
if #ids > 0 then raws = redis.call('HMGET', K_STATE, unpack(ids)) end
for k, id in ipairs(ids) do
  local f, events = nil, nil
  if raws[k] then f, events = parse(raws[k]) end
  if not f then
    out[#out + 1] = ''
  elseif stoppable(f[F_STATE]) then
    unindex(f[F_STATE], id, f)
    local fl = flow_of(K_JOBS, id, f)
    if fl then flow_release(K_FLOW, id, fl, false, true) end
    f[F_STATE] = 'cancelled'
    f[F_FINISHED_AT] = NOWS
    cancelled[#cancelled + 1] = NOW
    cancelled[#cancelled + 1] = id
    messages[#messages + 1] = id
    messages[#messages + 1] = 'cancelled while waiting'
    states[#states + 1] = id
    states[#states + 1] = pack(f, events .. event_line('cancelled', 'cancelled', f,
      'cancelled while waiting'))
    note_batch(moves, f, id, 'cancelled')
    out[#out + 1] = 'cancelled'
  elseif f[F_STATE] == 'active' then
    if f[F_CANCEL_REQUESTED] == '' then
      f[F_CANCEL_REQUESTED] = '1'
      states[#states + 1] = id
      states[#states + 1] = pack(f, events .. event_line('cancel_requested', 'active', f))
    end
    out[#out + 1] = 'active'
  else
    out[#out + 1] = f[F_STATE]
  end
end
bulk('HSET', K_STATE, states)
bulk('ZADD', K_CANCELLED, cancelled)
bulk('HSET', K_MESSAGES, messages)
flush_stale()
return {out, moves}
