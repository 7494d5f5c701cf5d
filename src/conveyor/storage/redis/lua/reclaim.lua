-- reclaim.lua: put active jobs of one queue whose lease expired back to pending ("recovered",
-- not an error attempt), or to dead after more than max_recoveries recoveries. Also scans a
-- slice of the job states for active jobs that lost their lease entry (eviction, restore).
-- KEYS: 1 active (zset lease expiry), 2 pending, 3 state, 4 dead, 5 meta, 6 notify,
--       7 messages, 8 jobs (static JSON, read for flow control), 9 flow (hash)
-- ARGV: 1 now|'', 2 queue, 3 max_recoveries, 4 limit, 5 scan cursor|'' (no scan),
--       6 scan count
-- Returns: {how many recovered or buried, batch moves, next scan cursor|''}
local K_ACTIVE = KEYS[1]
local K_PENDING = KEYS[2]
local K_STATE = KEYS[3]
local K_DEAD = KEYS[4]
local K_META = KEYS[5]
local K_NOTIFY = KEYS[6]
local K_MESSAGES = KEYS[7]
local K_JOBS = KEYS[8]
local K_FLOW = KEYS[9]
local max_recoveries = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local done, pushed, moves = 0, 0, {}

local function recover(id, f, events)
  redis.call('ZREM', K_ACTIVE, id)
  local r = num(f[R]) + 1
  f[R] = tostring(r)
  f[TK] = ''
  f[LE] = ''
  local fl = flow_of(K_JOBS, id, f)
  if fl then flow_release(K_FLOW, id, fl, true, r > max_recoveries) end
  if r > max_recoveries then
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
    events = events .. event_line('recovered', 'pending', f, 'lease expired; put back to pending')
    f[W] = ''
  end
  save(K_STATE, id, f, events)
  note_batch(moves, f, id, f[S])
  done = done + 1
end

for _, id in ipairs(redis.call('ZRANGEBYSCORE', K_ACTIVE, '-inf', NOW, 'LIMIT', 0, limit)) do
  local f, events = load(K_STATE, id)
  if f and f[S] == 'active' then recover(id, f, events) else redis.call('ZREM', K_ACTIVE, id) end
end

local next_cursor = ''
if ARGV[5] ~= '' then
  local page = redis.call('HSCAN', K_STATE, ARGV[5], 'COUNT', tonumber(ARGV[6]))
  next_cursor = page[1]
  local entries = page[2]
  for i = 1, #entries, 2 do
    local id = entries[i]
    if string.sub(entries[i + 1], 1, 7) == 'active\t' and not redis.call('ZSCORE', K_ACTIVE, id) then
      local f, events = parse(entries[i + 1])
      local expiry = num(f[LE])  -- a damaged expiry reads 0: recovered now
      if expiry <= NOW then recover(id, f, events) else
        redis.call('ZADD', K_ACTIVE, expiry, id) end
    end
  end
end
flush_counts(K_META)
notify(K_NOTIFY, pushed)
return {done, moves, next_cursor}
