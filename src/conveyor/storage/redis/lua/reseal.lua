-- reseal.lua: replace a job's stored payload, result and message when all three still equal
-- what the caller read (`conveyor jobs reencrypt`: the same data sealed again with the newest
-- key, docs/job-data.md). A job that moved meanwhile keeps what it has.
--- @include "_util"
--- @key jobs
--- @key results
--- @key messages
-- ARGV: 1 job id, 2 static JSON read, 3 static JSON to write, 4 result read, 5 result to
--       write, 6 message read, 7 message to write; each result and message is '-' for none
--       or '+' followed by the value
-- Returns: 1 replaced, 0 changed meanwhile or gone.
local id = ARGV[1]
local result = redis.call('HGET', K_RESULTS, id)
local message = redis.call('HGET', K_MESSAGES, id)
if redis.call('HGET', K_JOBS, id) ~= ARGV[2]
    or (result and '+' .. result or '-') ~= ARGV[4]
    or (message and '+' .. message or '-') ~= ARGV[6] then
  return 0
end
redis.call('HSET', K_JOBS, id, ARGV[3])
if ARGV[5] == '-' then
  redis.call('HDEL', K_RESULTS, id)
else
  redis.call('HSET', K_RESULTS, id, string.sub(ARGV[5], 2))
end
if ARGV[7] == '-' then
  redis.call('HDEL', K_MESSAGES, id)
else
  redis.call('HSET', K_MESSAGES, id, string.sub(ARGV[7], 2))
end
return 1
