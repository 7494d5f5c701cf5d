-- kept.lua: events kept for waits that begin later (docs/durable.md), in the shared
-- {events} slot: one hash field per event name and key, one event a line (id TAB sent_at TAB
-- until TAB data), expired lines dropped as the field is written.
--- @include "_clock"
--- @include "_util"
--- @key kept
-- ARGV: 1 now|'', 2 mode: "add" (3 field, 4 event id, 5 data, 6 seconds to keep),
--       "read" (3 field), or "sweep" (every field: drop what expired)
-- Returns: add and sweep: the lines left; read: {id, sent_at, data, ...} of the unexpired
--          events, oldest first
local function alive(field)
  local out = {}
  for _, line in ipairs(split_lines(redis.call('HGET', K_KEPT, field) or '')) do
    local a = string.find(line, '\t', 1, true)
    local b = a and string.find(line, '\t', a + 1, true)
    local c = b and string.find(line, '\t', b + 1, true)
    if c and tonumber(string.sub(line, b + 1, c - 1)) > NOW then
      out[#out + 1] = {string.sub(line, 1, a - 1), string.sub(line, a + 1, b - 1),
                       string.sub(line, c + 1), line}
    end
  end
  return out
end

local function write(field, events)
  local lines = {}
  for i, e in ipairs(events) do lines[i] = e[4] end
  if #lines == 0 then redis.call('HDEL', K_KEPT, field)
  else redis.call('HSET', K_KEPT, field, table.concat(lines, '\n')) end
  return #lines
end

local mode = ARGV[2]
if mode == 'add' then
  local events = alive(ARGV[3])
  events[#events + 1] = {ARGV[4], NOWS, ARGV[5], table.concat(
    {ARGV[4], NOWS, string.format('%.6f', NOW + tonumber(ARGV[6])), ARGV[5]}, '\t')}
  return write(ARGV[3], events)
elseif mode == 'read' then
  local out = {}
  for _, e in ipairs(alive(ARGV[3])) do
    out[#out + 1] = e[1]
    out[#out + 1] = e[2]
    out[#out + 1] = e[3]
  end
  return out
end
local left = 0
for _, field in ipairs(redis.call('HKEYS', K_KEPT)) do left = left + write(field, alive(field)) end
return left
