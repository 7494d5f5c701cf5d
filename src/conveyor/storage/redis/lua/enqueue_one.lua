-- enqueue_one.lua: store one new job of one queue, pending or scheduled, with no flow
-- control, batch or workflow: what enqueue.lua's "each" layout does for such a job, in the
-- fewest steps (DESIGN §2 "enqueue"). It is the one-by-one enqueue's script: a Lua call pays
-- for every definition it runs, and enqueue.lua's (unique locks, folds, groups, blocks) cost
-- three times these writes.
--- @include "_clock"
--- @include "_notify"
--- @key jobs       hash id -> static JSON
--- @key state      hash id -> state line + events
--- @key pending    list
--- @key scheduled  zset run_at
--- @key notify     list
-- ARGV: 1 now|'', 2 id, 3 run_at|'', 4 static JSON, 5 name, 6 deadline|'', then for a
--   caller-chosen id on a single server (not Cluster) the other queues' jobs hashes
-- Returns: "1" created, "0" the id already existed, here or in another queue (nothing written).

local id, run_at = ARGV[2], ARGV[3]
-- An id names one job in the store (docs/api.md, "Job ids"): read in this same step, so two
-- clients cannot both store one id in two queues. A generated id passes no key: no call.
for i = 7, #ARGV do
  if redis.call('HEXISTS', ARGV[i], id) == 1 then return '0' end
end
if redis.call('HSETNX', K_JOBS, id, ARGV[4]) == 0 then return '0' end
local when = tonumber(run_at)
local scheduled = when and when > NOW
-- The state line enqueue.lua's state_line() packs for such a job, in one concatenation: a
-- table of NFIELDS values filled by position and joined cost a fifth of this script's time.
-- The fields, in _fields.lua's order: state, created_at, attempts, errors, recoveries, token,
-- worker, lease_expires, started_at, finished_at, pending_since, run_at, last_token,
-- last_outcome, cancel_requested, progress, name, batch, deadline, created_scheduled,
-- flow_controlled (test_enqueue_one.py compares this line with enqueue.lua's).
local packed
if scheduled then
  packed = 'scheduled\t' .. NOWS .. '\t0\t0\t0\t\t\t\t\t\t\t' .. run_at .. '\t\t\t\t\t'
    .. ARGV[5] .. '\t\t' .. ARGV[6] .. '\t1\t\n'
else
  packed = 'pending\t' .. NOWS .. '\t0\t0\t0\t\t\t\t\t\t' .. NOWS .. '\t\t\t\t\t\t'
    .. ARGV[5] .. '\t\t' .. ARGV[6] .. '\t\t\n'
end
redis.call('HSET', K_STATE, id, packed)
if scheduled then
  redis.call('ZADD', K_SCHEDULED, when, id)
  return '1'
end
redis.call('LPUSH', K_PENDING, id)
notify(K_NOTIFY, 1)
return '1'
