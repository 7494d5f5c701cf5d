-- extend.lua: a worker's heartbeat for the jobs it holds in one queue: extend their leases.
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @include "_record"
--- @key state
--- @key active  zset lease expiry
-- ARGV: 1 now|'', 2 queue, 3 lease seconds, then pairs: job id, token
-- Returns: {lost ids (lease no longer this token's), ids whose cancellation was requested}
local lease_until = NOW + tonumber(ARGV[3])
local lost, cancel, states, active = {}, {}, {}, {}
for i = 4, #ARGV, 2 do
  local id = ARGV[i]
  local f, events = load(K_STATE, id)
  if not f or f[F_STATE] ~= 'active' or f[F_TOKEN] ~= ARGV[i + 1] then
    lost[#lost + 1] = id
  else
    f[F_LEASE_EXPIRES] = string.format('%.6f', lease_until)
    states[#states + 1] = id
    states[#states + 1] = pack(f, events)
    active[#active + 1] = lease_until
    active[#active + 1] = id
    if f[F_CANCEL_REQUESTED] ~= '' then cancel[#cancel + 1] = id end
  end
end
bulk('HSET', K_STATE, states)
bulk('ZADD', K_ACTIVE, active)
return {lost, cancel}
