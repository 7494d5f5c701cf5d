-- log.lua: append a running job's own messages and progress, fenced by its lease token.
-- KEYS: 1 jobs, 2 events
-- ARGV: 1 now|'', 2 job id, 3 token, 4 events NDJSON|'', 5 progress "done/total"|''
-- Returns: 1 stored, 0 refused (no such job, or the lease is not this token's).
local K_JOBS = KEYS[1]
local K_EVENTS = KEYS[2]
local id = ARGV[2]
local job = load(K_JOBS, id)
if not job or job.s ~= 'active' or job.tk ~= ARGV[3] then return 0 end
if ARGV[5] ~= '' then
  local sep = string.find(ARGV[5], '/', 1, true)
  job.pg = {tonumber(string.sub(ARGV[5], 1, sep - 1)), tonumber(string.sub(ARGV[5], sep + 1))}
  save(K_JOBS, id, job)
end
if ARGV[4] ~= '' then append_events(K_EVENTS, id, ARGV[4]) end
return 1
