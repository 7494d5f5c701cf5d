-- _recover.lua: shared KEYS and the recovery of one active job whose attempt was lost,
-- prepended after _lib.lua by scripts.py to reclaim.lua (the lease expired) and release.lua
-- (a supervisor saw the worker process die); not a script by itself.
-- The job goes back to pending ("recovered", not an error attempt), or to dead after more than
-- max_recoveries recoveries; a job whose cancellation was requested ends cancelled instead: it
-- must never run again. Its lease token is cleared, so the old holder's late writes are refused.
-- KEYS: 1 active (zset lease expiry), 2 pending, 3 state, 4 dead, 5 meta, 6 notify,
--       7 messages, 8 jobs (static JSON, read for flow control), 9 flow (hash),
--       10 cancelled (zset)
-- ARGV: 1 now|'', 2 queue, 3 max_recoveries (the rest belong to each script)
local K_ACTIVE = KEYS[1]
local K_PENDING = KEYS[2]
local K_STATE = KEYS[3]
local K_DEAD = KEYS[4]
local K_META = KEYS[5]
local K_NOTIFY = KEYS[6]
local K_MESSAGES = KEYS[7]
local K_JOBS = KEYS[8]
local K_FLOW = KEYS[9]
local K_CANCELLED = KEYS[10]
local max_recoveries = tonumber(ARGV[3])
local done, pushed, moves = 0, 0, {}

-- why: what lost the attempt ('lease expired', 'worker process died'), for the messages.
local function recover(id, f, events, why)
  redis.call('ZREM', K_ACTIVE, id)
  local r = num(f[R]) + 1
  f[R] = tostring(r)
  f[TK] = ''
  f[LE] = ''
  local cancel = f[CR] ~= ''
  local fl = flow_of(K_JOBS, id, f)
  if fl then flow_release(K_FLOW, id, fl, true, cancel or r > max_recoveries) end
  if cancel then
    local msg = 'cancelled: ' .. why
    f[S] = 'cancelled'
    f[FA] = NOWS
    redis.call('ZADD', K_CANCELLED, NOW, id)
    redis.call('HSET', K_MESSAGES, id, msg)
    events = events .. event_line('cancelled', 'cancelled', f, msg)
  elseif r > max_recoveries then
    local msg = 'recovered ' .. r .. ' times (poison job?)'
    f[S] = 'dead'
    f[FA] = NOWS
    redis.call('ZADD', K_DEAD, NOW, id)
    redis.call('HSET', K_MESSAGES, id, msg)
    count('d', f[N])
    events = events .. event_line('dead', 'dead', f, msg)
  else
    f[S] = 'pending'
    f[PT] = NOWS
    redis.call('RPUSH', K_PENDING, id)
    pushed = pushed + 1
    events = events .. event_line('recovered', 'pending', f, why .. '; put back to pending')
    f[W] = ''
  end
  save(K_STATE, id, f, events)
  note_batch(moves, f, id, f[S])
  done = done + 1
end
