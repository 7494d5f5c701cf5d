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
local states, active = {}, {}
bulk('ZREM', K_GROUP_MEMBERS, entries)
bulk('ZREM', K_AGGREGATING, ids)
local raws, jsons = {}, {}
for i = 1, #ids, 1000 do  -- each state entry and static record read in one HMGET per 1,000
  local part = {unpack(ids, i, math.min(i + 999, #ids))}
  local r, j = redis.call('HMGET', K_STATE, unpack(part)), redis.call('HMGET', K_JOBS, unpack(part))
  for k = 1, #part do raws[i + k - 1], jsons[i + k - 1] = r[k], j[k] end
end
for i, id in ipairs(ids) do
  local f, events = nil, nil
  if raws[i] then f, events = parse(raws[i]) end
  if f and f[F_STATE] == 'aggregating' then
    f[F_STATE] = 'active'
    f[F_ATTEMPTS] = tostring(num(f[F_ATTEMPTS]) + 1)
    f[F_TOKEN], f[F_WORKER] = lf[F_TOKEN], lf[F_WORKER]
    f[F_LEASE_EXPIRES], f[F_STARTED_AT], f[F_CANCEL_REQUESTED] = lf[F_LEASE_EXPIRES], NOWS, ''
    states[#states + 1] = id
    states[#states + 1] = pack(f, events .. event_line('started', 'active', f, nil, data))
    active[#active + 1] = tonumber(lf[F_LEASE_EXPIRES]) or NOW
    active[#active + 1] = id
    out[#out + 1] = {id, jsons[i] or '', f[F_TOKEN], f[F_ATTEMPTS], f[F_ERRORS],
                     f[F_RECOVERIES], ''}
    note_batch(moves, f, id, 'active')
  end
end
bulk('HSET', K_STATE, states)
bulk('ZADD', K_ACTIVE, active)
local rest, first = oldest(gid, g.max)
if first[1] then g.first = tonumber(string.match(first[1], '%z([^%z]*)%z')) or g.first end
if g.lead and g.lead ~= lead then
  save_group(gid, g)  -- a later lead is out: its share stays reserved
else
  g.lead, g.size = nil, #rest
  if g.size == 0 then
    drop_group(gid)
  else
    g.flush = due_at(g)
    save_group(gid, g)
  end
end
write_groups()
return {out, moves}
