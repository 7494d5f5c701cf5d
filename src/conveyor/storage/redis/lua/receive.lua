-- receive.lua: a running job's wait, fenced by its lease token (storage/durable.py,
-- DurableStore.receive). A step recorded final under the wait's name answers at once (a
-- retried call). Else the wait is registered (one of the same step keeps its first until and
-- since), and the oldest inbox message it matches — or for an event, the oldest kept event
-- the caller read from the {events} slot (kept.lua), sent at most `window` seconds before
-- the wait began and never taken by this job — is taken: recorded as the step, the wait
-- removed. Past `until` with nothing: recorded as null. Otherwise the job is to suspend.
--- @include "_clock"
--- @include "_fields"
--- @include "_record"
--- @include "_events"
--- @include "_durable_write"
--- @key state
--- @key steps
--- @key waits
--- @key inbox
--- @key listeners
-- ARGV: 1 now|'', 2 queue, 3 job id, 4 token, 5 kind, 6 step, 7 name, 8 key, 9 until,
--       10 window, then kept events oldest first, 3 each: event id, sent_at, data
-- Returns: {-1} refused; {1, data|nil, time} done; {0, nil, until, since} to suspend
local id, step = ARGV[3], ARGV[6]
local f, events = load(K_STATE, id)
if not f or f[F_STATE] ~= 'active' or f[F_TOKEN] ~= ARGV[4] then return {-1} end
local done = step_of(id, step)
if done and step_final(done) then
  local ok, rec = pcall(cjson.decode, done)
  if ok and type(rec) == 'table' then
    return {1, type(rec.r) == 'string' and rec.r or false, tostring(rec.t1 or NOWS)}
  end
  return {1, false, NOWS}
end
local w = wait_of(id)
if not w or w.step ~= step then
  drop_wait(id)
  w = {kind = ARGV[5], step = step, name = ARGV[7], key = ARGV[8], due = tonumber(ARGV[9]),
       window = tonumber(ARGV[10]), since = NOW, listening = true}
  put_wait(id, w)
end
local messages = inbox_of(id)
local at = answer_of(messages, w)
local taken_id, data = nil, nil
if at then
  taken_id, data = messages[at][1], messages[at][6]
  table.remove(messages, at)
  put_inbox(id, messages)
elseif w.kind == 'event' and w.window > 0 and #ARGV > 10 then
  local taken = taken_of(id)
  for i = 11, #ARGV, 3 do
    if not taken[ARGV[i]] and tonumber(ARGV[i + 1]) >= w.since - w.window then
      taken_id, data = ARGV[i], ARGV[i + 2]
      break
    end
  end
end
if not taken_id and NOW < w.due then
  return {0, false, string.format('%.6f', w.due), string.format('%.6f', w.since)}
end
local since = string.format('%.6f', w.since)
local rec = '{"n":' .. cjson.encode(step) .. ',"s":"ok","t0":' .. since .. ',"t1":' .. NOWS
if data then rec = rec .. ',"r":' .. cjson.encode(data) end
if f[F_ATTEMPTS] ~= '' and f[F_ATTEMPTS] ~= '0' then rec = rec .. ',"a":' .. f[F_ATTEMPTS] end
if taken_id then rec = rec .. ',"o":' .. cjson.encode(taken_id) end
put_step(id, step, rec .. '}', taken_id)
drop_wait(id)
local summary = data or 'null'
if string.sub(summary, 1, 18) == '{"$conveyor":{"e":' then  -- sealed (core/envelope.py)
  summary = 'encrypted'
elseif #summary > 120 then  -- cut at a character's first byte, as the other stores' 120 chars
  local cut = 121
  while cut > 1 and string.byte(summary, cut) >= 128 and string.byte(summary, cut) < 192 do
    cut = cut - 1
  end
  summary = string.sub(summary, 1, cut - 1) .. '…'
end
save(K_STATE, id, f, events .. event_line('step', nil, f, 'step ' .. step .. ': ok',
  '{"name":' .. cjson.encode(step) .. ',"status":"ok","duration":'
  .. string.format('%.6f', math.max(NOW - w.since, 0)) .. ',"summary":'
  .. cjson.encode(summary) .. '}'))
return {1, data or false, NOWS}
