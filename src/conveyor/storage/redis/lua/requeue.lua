-- requeue.lua: retry jobs of one queue by hand: dead, failed, cancelled or retrying jobs go
-- back to pending now with a "retried" event, or to waiting (workflow nodes the graph never
-- released: storage/graph_retry.py decided which, and their workflow's settle decides them).
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @include "_record"
--- @include "_events"
--- @include "_moves"
--- @include "_lineup"
--- @key state
--- @key pending    list
--- @key waiting
--- @key retrying
--- @key failed
--- @key dead
--- @key cancelled
--- @key messages
--- @key notify
--- @key meta       hash: the lineup's arrival counter
--- @key jobs       static JSON (a lined job's priority and key)
--- @key lineup     zset: lined pending jobs (_lineup.lua)
--- @key lined      hash id -> its lineup entry
--- @key aging      zset id -> when aging raises it next
-- ARGV: 1 now|'', 2 queue, 3 the state they go to ('pending' or 'waiting'), then job ids
-- Returns: {how many moved, batch moves}
-- The states a job is retried from, each kept in a zset index.
local INDEX = {dead = K_DEAD, failed = K_FAILED, cancelled = K_CANCELLED, retrying = K_RETRYING}
local target = ARGV[3]
local moved, moves = 0, {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local f, events = load(K_STATE, id)
  local K_INDEX = f and INDEX[f[F_STATE]]
  if K_INDEX then
    redis.call('ZREM', K_INDEX, id)
    f[F_STATE] = target
    f[F_FINISHED_AT] = ''
    f[F_CANCEL_REQUESTED] = ''
    f[F_WORKER] = ''
    if target == 'waiting' then
      redis.call('ZADD', K_WAITING, NOW, id)
    else
      f[F_PENDING_SINCE] = NOWS
      if lined(f) then line_push(id) else redis.call('LPUSH', K_PENDING, id) end
    end
    redis.call('HDEL', K_MESSAGES, id)  -- a retry by hand starts the story over
    save(K_STATE, id, f, events .. event_line('retried', target, f))
    note_batch(moves, f, id, target)
    moved = moved + 1
  end
end
if target ~= 'waiting' then notify(K_NOTIFY, moved) end
return {moved, moves}
