-- node.lua: move workflow nodes of one queue as their parents' outcomes decide
-- (storage/redis/graph.py). Each move applies only from the state it expects, so a replay
-- moves nothing twice.
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @include "_record"
--- @include "_events"
--- @include "_moves"
--- @include "_lineup"
--- @key jobs       static JSON
--- @key state
--- @key pending
--- @key waiting
--- @key failed
--- @key cancelled
--- @key messages
--- @key notify
--- @key meta       hash: the lineup's arrival counter
--- @key lineup     zset: lined pending jobs (_lineup.lua)
--- @key lined      hash id -> its lineup entry
--- @key aging      zset id -> when aging raises it next
-- ARGV: 1 now|'', 2 queue, then quadruples: id, move, text, message:
--   "release": waiting -> pending; text: the new static JSON (its parents' results put in
--              its arguments) or ''; event "released"
--   "fail" / "skip": waiting -> failed / cancelled; text: ''
-- and each with the message of its event (the job's message when it ends it)
--   "reopen": failed or cancelled -> waiting; event "reopened"
-- Returns: {how many moved, batch moves}
local moved, moves, released = 0, {}, 0
local ENDED = {failed = K_FAILED, cancelled = K_CANCELLED}
for i = 3, #ARGV, 4 do
  local id, move, text, msg = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local f, events = load(K_STATE, id)
  if f and move == 'release' and f[F_STATE] == 'waiting' then
    redis.call('ZREM', K_WAITING, id)
    if text ~= '' then redis.call('HSET', K_JOBS, id, text) end
    f[F_STATE], f[F_PENDING_SINCE] = 'pending', NOWS
    if lined(f) then line_push(id) else redis.call('LPUSH', K_PENDING, id) end
    save(K_STATE, id, f, events .. event_line('released', 'pending', f, msg))
    note_batch(moves, f, id, 'pending')
    moved, released = moved + 1, released + 1
  elseif f and (move == 'fail' or move == 'skip') and f[F_STATE] == 'waiting' then
    local state = 'failed'
    if move == 'skip' then state = 'cancelled' end
    local K_END = ENDED[state]
    redis.call('ZREM', K_WAITING, id)
    redis.call('ZADD', K_END, NOW, id)
    f[F_STATE], f[F_FINISHED_AT] = state, NOWS
    redis.call('HSET', K_MESSAGES, id, msg)
    save(K_STATE, id, f, events .. event_line(state, state, f, msg))
    note_batch(moves, f, id, state)
    moved = moved + 1
  elseif f and move == 'reopen' and (f[F_STATE] == 'failed' or f[F_STATE] == 'cancelled') then
    local K_END = ENDED[f[F_STATE]]
    redis.call('ZREM', K_END, id)
    redis.call('ZADD', K_WAITING, NOW, id)
    redis.call('HDEL', K_MESSAGES, id)
    f[F_STATE], f[F_FINISHED_AT] = 'waiting', ''
    save(K_STATE, id, f, events .. event_line('reopened', 'waiting', f, msg))
    note_batch(moves, f, id, 'waiting')
    moved = moved + 1
  end
end
notify(K_NOTIFY, released)
return {moved, moves}
