-- _record.lua: a job's state entry, read and written.
--- @include "_fields"
--
-- A job is stored in two hash entries of its queue:
--   jobs[id]  = immutable JSON written by the client: name, payload, options ("static")
--   state[id] = the fields of _fields.lua joined by TAB, then "\n", then the NDJSON event log.
-- Parsing a TAB line and concatenating strings is far cheaper in Lua than cjson round trips,
-- and reading or writing a whole page of jobs takes one HMGET/HSET.

-- A sound line (NFIELDS fields) is read in one match, half the cost of a find and a sub per
-- field (issue 53); Lua captures at most 32, and any other line takes the loop.
local SOUND = NFIELDS <= 32 and ('^' .. string.rep('([^\t]*)\t', NFIELDS - 1) .. '([^\t]*)$')

-- A state line parsed into fields, its event log, and why it is damaged (nil when sound).
-- Never raises: a truncated or garbled line yields '' for every missing field, so a script
-- can still decide what to do with that one job before it writes anything (Redis does not
-- roll back a script that fails half way, DESIGN §7).
local function parse(raw)
  local nl = string.find(raw, '\n', 1, true)
  local head, events = raw, ''
  if nl then
    head = string.sub(raw, 1, nl - 1)
    events = string.sub(raw, nl + 1)
  end
  if SOUND then
    local f = {string.match(head, SOUND)}
    if f[1] then
      if STATES[f[F_STATE]] then return f, events, nil end
      return f, events, 'state entry names no known state'
    end
  end
  local f, pos, bad = {}, 1, nil
  for i = 1, NFIELDS - 1 do
    local tab = pos and string.find(head, '\t', pos, true)
    if tab then
      f[i] = string.sub(head, pos, tab - 1)
      pos = tab + 1
    else
      if pos then f[i] = string.sub(head, pos) else f[i] = '' end
      if not bad then
        bad = 'state entry truncated (' .. i .. ' of ' .. NFIELDS .. ' fields)'
      end
      pos = nil
    end
  end
  if pos then f[NFIELDS] = string.sub(head, pos) else f[NFIELDS] = '' end
  if not bad and not STATES[f[F_STATE]] then bad = 'state entry names no known state' end
  return f, events, bad
end

local function pack(f, events)
  return table.concat(f, '\t', 1, NFIELDS) .. '\n' .. events
end

local function load(K_STATE, id)
  local raw = redis.call('HGET', K_STATE, id)
  if not raw then return nil, nil end
  return parse(raw)
end

local function save(K_STATE, id, f, events)
  redis.call('HSET', K_STATE, id, pack(f, events))
end
