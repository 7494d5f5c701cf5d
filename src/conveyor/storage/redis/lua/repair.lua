-- repair.lua: put back pending jobs that are missing from their queue's pending list (stranded
-- by an earlier version's dequeue.lua failing after its RPOP, or by list entries deleted by
-- hand). The candidates come from a pass of repair.py: ids whose state entry says pending
-- since before the pass began that were in no snapshot of the list.
--- @include "_clock"
--- @include "_util"
--- @include "_fields"
--- @include "_record"
--- @include "_events"
--- @key state    hash
--- @key pending  list
--- @key parked   zset
--- @key published  zset: handed to a broker's relay, not stranded
--- @key notify   list
--- @key lined    hash: lined pending jobs wait in their lineup (_lineup.lua), not stranded
-- ARGV: 1 now|'', 2 queue, then pairs: job id, its pending-since field as the pass read it
-- Returns: how many jobs were put back.
-- The re-check is atomic and O(1) per job, no LPOS (a walk of the whole list: ~12 ms on a
-- 200,000-job list): every script that pushes a job to the list rewrites its pending-since
-- field in the same step, so a job still pending with the same field, and not parked, has not
-- been pushed since the pass saw it missing from the list. This script rewrites the field
-- too, so a call run twice (a retry after a lost reply) pushes nothing the second time.
local MESSAGE = "was pending but missing from its queue's list; put back"
local pushed = 0
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  local f, events = load(K_STATE, id)
  if f and f[F_STATE] == 'pending' and f[F_PENDING_SINCE] == ARGV[i + 1]
      and not redis.call('ZSCORE', K_PARKED, id) and not redis.call('ZSCORE', K_PUBLISHED, id)
      and redis.call('HEXISTS', K_LINED, id) == 0 then
    -- RPUSH: the tail is where dequeue pops, and this job has waited longer than most.
    redis.call('RPUSH', K_PENDING, id)
    f[F_PENDING_SINCE] = NOWS
    save(K_STATE, id, f, events .. event_line('recovered', 'pending', f, MESSAGE))
    pushed = pushed + 1
  end
end
notify(K_NOTIFY, pushed)
return pushed
