-- _counts.lua: outcome counters of the queue, all time per job name (its meta hash) and per
-- minute (its history: Inspector.history, and "today"), added up during the call and written
-- once at its end (flush_counts).
-- The history is a ring of the last day's minutes, one field per minute of the day
-- ("minute % 1440" -> "<minute> <processed> <failed> <dead> <retried>"): a field holding an
-- older minute starts again from zero, so the hash never holds more than 1,440 fields and
-- needs no trimming. HISTORY_MINUTES = records.HISTORY_MINUTES (tests/redis checks).
--- @include "_clock"
--- @needs-keys history
local COUNTS = {}
local HISTORY_MINUTES = 1440
local MINUTE = math.floor(NOW / 60)
local COLUMN = {p = 1, f = 2, d = 3, r = 4}
local BY_MINUTE = nil  -- {processed, failed, dead, retried} counted in this call
local function count(what, name)
  local k = what .. ':' .. name
  COUNTS[k] = (COUNTS[k] or 0) + 1
  BY_MINUTE = BY_MINUTE or {0, 0, 0, 0}
  BY_MINUTE[COLUMN[what]] = BY_MINUTE[COLUMN[what]] + 1
end
local function flush_counts(K_META)
  for field, by in pairs(COUNTS) do redis.call('HINCRBY', K_META, field, by) end
  if BY_MINUTE == nil then return end
  local slot = tostring(MINUTE % HISTORY_MINUTES)
  local old = redis.call('HGET', K_HISTORY, slot)
  local n = {0, 0, 0, 0}
  if old then
    local m, p, f, d, r = string.match(old, '^(%d+) (%d+) (%d+) (%d+) (%d+)$')
    if tonumber(m) == MINUTE then n = {tonumber(p), tonumber(f), tonumber(d), tonumber(r)} end
  end
  redis.call('HSET', K_HISTORY, slot, string.format('%d %d %d %d %d', MINUTE,
    n[1] + BY_MINUTE[1], n[2] + BY_MINUTE[2], n[3] + BY_MINUTE[3], n[4] + BY_MINUTE[4]))
end
