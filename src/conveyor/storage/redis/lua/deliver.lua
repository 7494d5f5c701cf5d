-- deliver.lua: a message into the inboxes of jobs of one queue (storage/durable.py,
-- DurableStore.send and send_event): to one job by id, or to every job of the queue whose
-- event wait listens for its name and key (each stops listening: a wait takes one event).
-- A message id a job holds or took already is not stored again; each suspended job it
-- answers is made pending in the same call (a lined one into its queue's lineup).
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @include "_record"
--- @include "_events"
--- @include "_moves"
--- @include "_durable_write"
--- @include "_lineup"
--- @key state
--- @key scheduled
--- @key pending
--- @key notify
--- @key messages
--- @key steps
--- @key waits
--- @key inbox
--- @key listeners
--- @key jobs       static JSON: a lined job's priority and fair key (_lineup.lua)
--- @key meta
--- @key lineup     zset: lined pending jobs (_lineup.lua)
--- @key lined      hash id -> its lineup entry
--- @key aging      zset id -> when aging raises it next
-- ARGV: 1 now|'', 2 queue, 3 job id ('' for an event: every listening wait), 4 message id,
--       5 kind, 6 name, 7 key, 8 data, 9 the woken job's message
-- Returns: {reached (a send: -1 no such job, 0 a finished one), woken, batch moves}
local targets = {}
if ARGV[3] ~= '' then
  local f = load(K_STATE, ARGV[3])
  if not f then return {-1, 0, {}} end
  if TERMINAL[f[F_STATE]] then return {0, 0, {}} end
  targets[1] = ARGV[3]
else
  local prefix = ARGV[6] .. US .. ARGV[7] .. US
  for _, member in ipairs(redis.call('ZRANGEBYLEX', K_LISTENERS, '[' .. prefix,
                                     '[' .. prefix .. '\255')) do
    local id = string.sub(member, #prefix + 1)
    local f = load(K_STATE, id)
    local w = wait_of(id)
    if f and w and not TERMINAL[f[F_STATE]] then
      w.listening = false
      put_wait(id, w)
      targets[#targets + 1] = id
    elseif not f or not w then  -- a finished job's wait stays, for a retry by hand
      redis.call('ZREM', K_LISTENERS, member)
      if w then drop_wait(id) end
    end
  end
end
local woken, moves = 0, {}
for _, id in ipairs(targets) do
  local messages = inbox_of(id)
  local fresh = not taken_of(id)[ARGV[4]]
  for _, m in ipairs(messages) do
    if m[1] == ARGV[4] then fresh = false end
  end
  if fresh then
    messages[#messages + 1] = {ARGV[4], ARGV[5], ARGV[6], ARGV[7], NOWS, ARGV[8]}
    put_inbox(id, messages)
    local f, events = load(K_STATE, id)
    if f and f[F_STATE] == 'scheduled' and durable_answered(id) then
      redis.call('ZREM', K_SCHEDULED, id)
      f[F_STATE], f[F_PENDING_SINCE], f[F_WORKER] = 'pending', NOWS, ''
      save(K_STATE, id, f, events .. event_line('woken', 'pending', f, ARGV[9]))
      redis.call('HSET', K_MESSAGES, id, ARGV[9])
      if lined(f) then line_push(id) else redis.call('LPUSH', K_PENDING, id) end
      note_batch(moves, f, id, 'pending')
      woken = woken + 1
    end
  end
end
notify(K_NOTIFY, woken)
return {#targets, woken, moves}
