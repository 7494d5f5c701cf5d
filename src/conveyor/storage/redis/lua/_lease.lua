-- _lease.lua: leasing and expiring pending jobs, shared by dequeue.lua (jobs it pops) and
-- start.lua (jobs a broker delivered). The changes are collected here and written at the end
-- by flush_leases(); `out` and `lease_moves` are what the calling script returns.
-- ARGV: 2 queue, 3 worker id, 5 lease seconds, 6 token prefix (the callers' own layout).
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @include "_record"
--- @include "_events"
--- @include "_counts"
--- @include "_moves"
--- @needs-keys state active dead messages
local EXPIRED = 'deadline passed before the job could start'
local lease_until = NOW + tonumber(ARGV[5])
local lease_s = string.format('%.6f', lease_until)
local token_tail = '/' .. ARGV[2]
local out, lease_moves, states, active, dead = {}, {}, {}, {}, {}
local seq = 0

-- A pending job that must never start ends dead here: its deadline passed ('expired'), or
-- `why` says which of its keys breaks the key rule (_admit.lua's flow_broken: 'dead').
local function expire(id, f, events, why)
  local kind, message = 'expired', EXPIRED
  if why then kind, message = 'dead', why end
  f[F_STATE] = 'dead'
  f[F_FINISHED_AT] = NOWS
  states[#states + 1] = id
  states[#states + 1] = pack(f, events .. event_line(kind, 'dead', f, message))
  redis.call('HSET', K_MESSAGES, id, message)
  dead[#dead + 1] = NOW
  dead[#dead + 1] = id
  count('d', f[F_NAME])
  note_batch(lease_moves, f, id, 'dead')
end

-- mark: start.lua's '#' and the id of the message that started the lease, put before the
-- "/queue" tail that acks read the queue from; probe: the message of the job's 'breaker'
-- event when it starts as its breaker's probe (_admit.lua's flow_admit)
local function lease(id, static, f, events, damage, mark, probe)
  seq = seq + 1
  if probe then events = events .. event_line('breaker', 'pending', nil, probe) end
  local token = ARGV[6] .. seq .. (mark or '') .. token_tail
  f[F_STATE] = 'active'
  f[F_ATTEMPTS] = tostring(num(f[F_ATTEMPTS]) + 1)
  f[F_TOKEN] = token
  f[F_WORKER] = ARGV[3]
  f[F_LEASE_EXPIRES] = lease_s
  f[F_STARTED_AT] = NOWS
  states[#states + 1] = id
  states[#states + 1] = pack(f, events .. event_line('started', 'active', f))
  active[#active + 1] = lease_until
  active[#active + 1] = id
  out[#out + 1] = {id, static or '', token, f[F_ATTEMPTS], f[F_ERRORS], f[F_RECOVERIES], damage or ''}
  note_batch(lease_moves, f, id, 'active')
end

local function flush_leases()
  bulk('HSET', K_STATE, states)
  bulk('ZADD', K_ACTIVE, active)
  bulk('ZADD', K_DEAD, dead)
end
