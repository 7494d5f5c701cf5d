-- enqueue_one.lua: store one new job of one queue, pending or scheduled, with no flow
-- control, batch or workflow: what enqueue.lua's "each" layout does for such a job, in the
-- fewest steps (DESIGN §2 "enqueue"). It is the one-by-one enqueue's script: a Lua call pays
-- for every definition it runs, and enqueue.lua's (unique locks, folds, groups, blocks) cost
-- three times these writes.
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @key jobs       hash id -> static JSON
--- @key state      hash id -> state line + events
--- @key pending    list
--- @key scheduled  zset run_at
--- @key notify     list
-- ARGV: 1 now|'', 2 id, 3 run_at|'', 4 static JSON, 5 name, 6 deadline|''
-- Returns: "1" created, "0" the id already existed (nothing written).

local id, run_at = ARGV[2], ARGV[3]
if redis.call('HSETNX', K_JOBS, id, ARGV[4]) == 0 then return '0' end
local when = tonumber(run_at)
local scheduled = when and when > NOW
-- The state line enqueue.lua's state_line() packs for such a job.
local line = {}
for f = 1, NFIELDS do line[f] = '' end
line[F_CREATED_AT], line[F_ATTEMPTS], line[F_ERRORS], line[F_RECOVERIES] = NOWS, '0', '0', '0'
line[F_NAME], line[F_DEADLINE] = ARGV[5], ARGV[6]
if scheduled then
  line[F_STATE], line[F_RUN_AT], line[F_CREATED_SCHEDULED] = 'scheduled', run_at, '1'
else
  line[F_STATE], line[F_PENDING_SINCE] = 'pending', NOWS
end
redis.call('HSET', K_STATE, id, table.concat(line, '\t', 1, NFIELDS) .. '\n')
if scheduled then
  redis.call('ZADD', K_SCHEDULED, when, id)
  return '1'
end
redis.call('LPUSH', K_PENDING, id)
notify(K_NOTIFY, 1)
return '1'
