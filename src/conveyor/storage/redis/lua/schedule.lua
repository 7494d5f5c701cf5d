-- schedule.lua: one change to one periodic schedule, applied only if its record is still the
-- one the caller read (a compare-and-set: storage/redis/schedules.py computes the change with
-- the rules every store shares, storage/schedule_edits.py), with its audit entry.
--- @include "_util"
--- @key records  hash: name -> record JSON
--- @key ticks    zset: name -> newest tick enqueued
--- @key changes  list: change JSON, newest first
-- ARGV: 1 now|'' (unused), 2 name, 3 the record as read ('' = none), 4 the new record
--       ('' = remove the schedule), 5 the change JSON ('' = none), 6 changes kept
-- Returns: 1 applied (or already in place: a retry of a call whose reply was lost), 0 the
-- record changed since it was read (read it again and decide again)
local name = ARGV[2]
local current = redis.call('HGET', K_RECORDS, name) or ''
if current == ARGV[4] then
  return 1
end
if current ~= ARGV[3] then
  return 0
end
if ARGV[4] == '' then
  redis.call('HDEL', K_RECORDS, name)
  redis.call('ZREM', K_TICKS, name)
else
  redis.call('HSET', K_RECORDS, name, ARGV[4])
end
if ARGV[5] ~= '' then
  redis.call('LPUSH', K_CHANGES, ARGV[5])
  redis.call('LTRIM', K_CHANGES, 0, num(ARGV[6]) - 1)
end
return 1
