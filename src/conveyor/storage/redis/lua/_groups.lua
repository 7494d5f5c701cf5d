-- _groups.lua: aggregation groups (storage/aggregation.py, whose steps these are), kept in
-- the queue's slot: K_AGGREGATING (member id -> arrival), K_GROUPS (group record by group id
-- "name\31key"), K_GROUP_DUE (group id -> flush time) and K_GROUP_MEMBERS (lex entries
-- "<group id>\0<arrival>\0<id>", all scores 0: one group's members, oldest first, are a
-- range). A member's arrival is its F_PENDING_SINCE; its group settings are in its
-- F_FLOW_CONTROLLED ("g" key \31 grace \31 max_delay \31 max_size).
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @needs-keys aggregating groups group_due group_members
local RECHECK = 60  -- aggregation.RECHECK: seconds a lead holds its group (scripts.py checks)

-- The member's group key and settings from its state line, or nil for a job that is none.
local function group_spec(f)
  local v = f[F_FLOW_CONTROLLED]
  if string.sub(v, 1, 1) ~= 'g' then return nil end
  local key, grace, delay, size = string.match(v, '^g(.*)\31([^\31]*)\31([^\31]*)\31([^\31]*)$')
  if not key then return nil end
  return key, tonumber(grace) or 0, tonumber(delay) or 0, math.max(tonumber(size) or 1, 1)
end

local function group_id(f, key) return f[F_NAME] .. '\31' .. key end

local function member_entry(gid, arrival, id)
  return gid .. '\0' .. string.format('%017.6f', tonumber(arrival) or 0) .. '\0' .. id
end

-- The ids of a group's oldest members (at most n) and their entries.
local function oldest(gid, n)
  local entries = redis.call('ZRANGEBYLEX', K_GROUP_MEMBERS, '[' .. gid .. '\0',
                             '(' .. gid .. '\1', 'LIMIT', 0, n)
  local ids = {}
  for i, e in ipairs(entries) do ids[i] = string.match(e, '%z[^%z]*%z(.*)$') end
  return ids, entries
end

-- Groups read once per script and written back by write_groups(), with the index entries of
-- the members that joined: one HSET and a few ZADDs per script call instead of five commands
-- per member.
local GROUPS, DIRTY, DROPPED = {}, {}, {}
local JOINED, ENTRIES = {}, {}

local function load_group(gid)
  local cached = GROUPS[gid]
  if cached ~= nil then return cached or nil end
  local raw = redis.call('HGET', K_GROUPS, gid)
  local g = nil
  if raw then
    local a, b, c, d, e, f, h, i = string.match(raw,
      '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
    if a then  -- else damaged: treated as new (its members stay in the index)
      local lead = nil
      if e ~= '' then lead = e end
      g = {first = tonumber(a) or NOW, last = tonumber(b) or NOW, size = tonumber(c) or 0,
           flush = tonumber(d) or NOW, lead = lead, grace = tonumber(f) or 0,
           delay = tonumber(h) or 0, max = math.max(tonumber(i) or 1, 1)}
    end
  end
  GROUPS[gid] = g or false
  return g
end

local function save_group(gid, g)
  GROUPS[gid], DIRTY[gid], DROPPED[gid] = g, true, nil
end

local function drop_group(gid)
  GROUPS[gid], DIRTY[gid], DROPPED[gid] = false, nil, true
end

-- Write what this script changed: group records, due times, dropped groups, new members.
local function write_groups()
  local records, due, gone = {}, {}, {}
  for gid in pairs(DIRTY) do
    local g = GROUPS[gid]
    records[#records + 1] = gid
    records[#records + 1] = string.format('%.6f|%.6f|%d|%.6f|%s|%.6f|%.6f|%d',
      g.first, g.last, g.size, g.flush, g.lead or '', g.grace, g.delay, g.max)
    due[#due + 1] = g.flush
    due[#due + 1] = gid
  end
  for gid in pairs(DROPPED) do gone[#gone + 1] = gid end
  bulk('HSET', K_GROUPS, records)
  bulk('ZADD', K_GROUP_DUE, due)
  bulk('HDEL', K_GROUPS, gone)
  bulk('ZREM', K_GROUP_DUE, gone)
  bulk('ZADD', K_AGGREGATING, JOINED)
  bulk('ZADD', K_GROUP_MEMBERS, ENTRIES)
  DIRTY, DROPPED, JOINED, ENTRIES = {}, {}, {}, {}
end

local function due_at(g)
  if g.size >= g.max then return NOW end
  return math.min(g.last + g.grace, g.first + g.delay)
end

-- A member arrives (its f's state is what it would be otherwise: pending); true when it
-- leads: it stays pending. Otherwise the caller stores it 'aggregating' and calls
-- add_member.
local function join(f, id)
  local key, grace, delay, max = group_spec(f)
  local gid = group_id(f, key)
  local g = load_group(gid)
  if not g or (g.size == 0 and not g.lead) then
    g = {first = NOW, last = NOW, size = 0, flush = NOW}
  end
  g.last, g.grace, g.delay, g.max = NOW, grace, delay, max
  if g.size + 1 >= max then  -- with it, a full run: it leads, the oldest reserved
    g.lead, g.flush = id, NOW + RECHECK
    g.size = g.size + 1 - max
    save_group(gid, g)
    return true
  end
  g.size = g.size + 1
  if not g.lead then g.flush = due_at(g) end
  save_group(gid, g)
  return false
end

-- Index a member that joined (written by write_groups).
local function add_member(f, id)
  local key = group_spec(f)
  JOINED[#JOINED + 1] = NOW
  JOINED[#JOINED + 1] = id
  ENTRIES[#ENTRIES + 1] = 0
  ENTRIES[#ENTRIES + 1] = member_entry(group_id(f, key), f[F_PENDING_SINCE], id)
end

-- Out of the indexes of aggregating members (its state is moving on).
local function remove_member(f, id)
  redis.call('ZREM', K_AGGREGATING, id)
  local key = group_spec(f)
  if key then
    redis.call('ZREM', K_GROUP_MEMBERS, member_entry(group_id(f, key), f[F_PENDING_SINCE], id))
  end
end
