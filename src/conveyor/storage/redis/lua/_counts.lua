-- _counts.lua: outcome counters of the queue (its meta hash), per job name and per day,
-- added up during the call and written once at its end (flush_counts).
--- @include "_clock"
local COUNTS = {}
local function count(what, name)
  local k1, k2 = what .. ':' .. name, what .. 'd:' .. DAY
  COUNTS[k1] = (COUNTS[k1] or 0) + 1
  COUNTS[k2] = (COUNTS[k2] or 0) + 1
end
local function flush_counts(K_META)
  for field, by in pairs(COUNTS) do redis.call('HINCRBY', K_META, field, by) end
end
