-- reseal.lua: replace a job's stored payload, result and message when all three still equal
-- what the caller read (`conveyor jobs reencrypt`: the same data sealed again with the newest
-- key, docs/job-data.md). A job that moved meanwhile keeps what it has.
--- @key jobs
--- @key results
--- @key messages
-- ARGV: 1 job id, 2 static JSON read, 3 static JSON to write, 4 result read, 5 result to
--       write, 6 message read, 7 message to write; each result and message is '-' for none
--       or '+' followed by the value
-- Returns: 1 replaced, 0 changed meanwhile or gone.
local id = ARGV[1]
local function held(key)
  local value = redis.call('HGET', key, id)
  if value then return '+' .. value end
  return '-'
end
if redis.call('HGET', K_JOBS, id) ~= ARGV[2] or held(K_RESULTS) ~= ARGV[4]
    or held(K_MESSAGES) ~= ARGV[6] then
  return 0
end
redis.call('HSET', K_JOBS, id, ARGV[3])
local function put(key, value)
  if value == '-' then redis.call('HDEL', key, id) else redis.call('HSET', key, id,
    string.sub(value, 2)) end
end
put(K_RESULTS, ARGV[5])
put(K_MESSAGES, ARGV[7])
return 1
