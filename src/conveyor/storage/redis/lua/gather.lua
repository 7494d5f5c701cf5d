-- gather.lua: lease the members of a lead's aggregation group for its run, on the lead's
-- terms (its token, worker and lease expiry), fenced by the lead's lease (Storage.gather).
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @include "_record"
--- @include "_events"
--- @include "_moves"
--- @include "_groups"
--- @key jobs           hash static JSON
--- @key state          hash state line + events
--- @key active         zset lease expiry
--- @key aggregating    zset member id -> arrival
--- @key groups         hash group id -> record
--- @key group_due      zset group id -> flush time
--- @key group_members  zset lex entries of members by group and arrival
-- ARGV: 1 now|'', 2 queue, 3 lead id, 4 lead token
-- Returns: false when the lead's lease is gone; else {leased, batch moves}, leased as
--          dequeue.lua's rows {id, static JSON|'', token, attempt, errors, recoveries, ''}.
local lead = ARGV[3]
local lf = load(K_STATE, lead)
if not lf or lf[F_STATE] ~= 'active' or lf[F_TOKEN] ~= ARGV[4] then return false end
local out, moves = {}, {}
local key = group_spec(lf)
if not key then return {out, moves} end
local gid = group_id(lf, key)
local g = load_group(gid)
if not g then return {out, moves} end
local data = '{"lead":' .. cjson.encode(lead) .. '}'
local ids, entries = oldest(gid, g.max - 1)
local active = {}
for i, id in ipairs(ids) do
  redis.call('ZREM', K_GROUP_MEMBERS, entries[i])
  local f, events = load(K_STATE, id)
  if f and f[F_STATE] == 'aggregating' then
    redis.call('ZREM', K_AGGREGATING, id)
    f[F_STATE] = 'active'
    f[F_ATTEMPTS] = tostring(num(f[F_ATTEMPTS]) + 1)
    f[F_TOKEN], f[F_WORKER] = lf[F_TOKEN], lf[F_WORKER]
    f[F_LEASE_EXPIRES], f[F_STARTED_AT], f[F_CANCEL_REQUESTED] = lf[F_LEASE_EXPIRES], NOWS, ''
    save(K_STATE, id, f, events .. event_line('started', 'active', f, nil, data))
    active[#active + 1] = tonumber(lf[F_LEASE_EXPIRES]) or NOW
    active[#active + 1] = id
    out[#out + 1] = {id, redis.call('HGET', K_JOBS, id) or '', f[F_TOKEN], f[F_ATTEMPTS],
                     f[F_ERRORS], f[F_RECOVERIES], ''}
    note_batch(moves, f, id, 'active')
  end
end
bulk('ZADD', K_ACTIVE, active)
local rest, first = oldest(gid, g.max)
if first[1] then g.first = tonumber(string.match(first[1], '%z([^%z]*)%z')) or g.first end
if g.lead and g.lead ~= lead then
  save_group(gid, g)  -- a later lead is out: its share stays reserved
  return {out, moves}
end
g.lead, g.size = nil, #rest
if g.size == 0 then
  drop_group(gid)
else
  g.flush = due_at(g)
  save_group(gid, g)
end
return {out, moves}
