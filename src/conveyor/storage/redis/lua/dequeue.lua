-- dequeue.lua: lease up to `count` pending jobs of one queue (DESIGN §2 "dequeue (lease)").
-- KEYS: 1 pending (list), 2 active (zset lease expiry), 3 jobs (hash static JSON),
--       4 state (hash state line + events), 5 meta (hash: paused flag, counters),
--       6 dead (zset finished_at)
-- ARGV: 1 now|'', 2 queue, 3 worker id, 4 count (at most 1000), 5 lease seconds,
--       6 token prefix
-- Returns: {leased, batch moves}; leased = {id, static JSON, token, attempt, errors,
--          recoveries} per job; batch moves = {batch id, job id, "state:queue"}.
local K_PENDING = KEYS[1]
local K_ACTIVE = KEYS[2]
local K_JOBS = KEYS[3]
local K_STATE = KEYS[4]
local K_META = KEYS[5]
local K_DEAD = KEYS[6]

if redis.call('HEXISTS', K_META, 'paused') == 1 then return {{}, {}} end
local want = tonumber(ARGV[4])
local lease_until = NOW + tonumber(ARGV[5])
local lease_s = string.format('%.6f', lease_until)
local token_tail = '/' .. ARGV[2]
local out, moves, states, active, dead = {}, {}, {}, {}, {}
local seq = 0
local seen = {}

local function expire(id, f, events)
  f[S] = 'dead'
  f[FA] = NOWS
  states[#states + 1] = id
  states[#states + 1] = pack(f, events .. event_line('expired', 'dead', f,
    'deadline passed before the job could start'))
  dead[#dead + 1] = NOW
  dead[#dead + 1] = id
  count('d', f[N])
  note_batch(moves, f, id, 'dead')
end

local function lease(id, static, f, events)
  seq = seq + 1
  local token = ARGV[6] .. seq .. token_tail
  f[S] = 'active'
  f[A] = tostring(num(f[A]) + 1)
  f[TK] = token
  f[W] = ARGV[3]
  f[LE] = lease_s
  f[SA] = NOWS
  states[#states + 1] = id
  states[#states + 1] = pack(f, events .. event_line('started', 'active', f))
  active[#active + 1] = lease_until
  active[#active + 1] = id
  out[#out + 1] = {id, static, token, f[A], f[E], f[R]}
  note_batch(moves, f, id, 'active')
end

while #out < want do
  local ids = redis.call('RPOP', K_PENDING, want - #out)
  if not ids then break end
  local raws = redis.call('HMGET', K_STATE, unpack(ids))
  local statics = redis.call('HMGET', K_JOBS, unpack(ids))
  for k, id in ipairs(ids) do
    -- A missing or non-pending record is a stale list entry (deleted job): drop it.
    if raws[k] and statics[k] and not seen[id] then
      seen[id] = true
      local f, events = parse(raws[k])
      if f[S] == 'pending' then
        if f[DL] ~= '' and tonumber(f[DL]) < NOW then
          expire(id, f, events)
        else
          lease(id, statics[k], f, events)
        end
      end
    end
  end
end
bulk('HSET', K_STATE, states)
bulk('ZADD', K_ACTIVE, active)
bulk('ZADD', K_DEAD, dead)
flush_counts(K_META)
return {out, moves}
