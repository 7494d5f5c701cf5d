-- conveyor PostgreSQL schema, version 3: indexes the hot path cannot be misled by.
--
-- Upgrades in place: every job is kept; only indexes change (the new ones are built in this
-- migration's transaction, which holds writers back for as long as building them takes:
-- about a second per million jobs).
--
-- * jobs_state_queue (state, queue) held every job, finished ones included, and it could
--   serve dequeue's `state = 'pending' AND queue = $1` too: on a table not yet analyzed (a
--   fresh schema, or right after a big enqueue) the planner then sorted every pending job on
--   each lease instead of walking jobs_ready in order. The live states are counted on their
--   own partial indexes instead (pending: jobs_ready, active: jobs_active, scheduled and
--   retrying: jobs_due) and the finished ones on jobs_done.
-- * jobs_lease and jobs_worker (both over active jobs) become one index, jobs_active: a lease
--   takes one index entry fewer, and a heartbeat, which only moves lease_expires_at, no longer
--   changes an indexed column, so PostgreSQL can update the row in place (HOT). Reclaiming
--   expired leases reads the active jobs, which are bounded by the workers' slots.
-- * jobs_finished (rows with finished_at set) becomes jobs_done, over the finished states
--   themselves, so a count or a page of `state = 'succeeded'` can use it, and it carries the
--   queue, so counting finished jobs per queue reads the index alone.

DROP INDEX jobs_state_queue;
DROP INDEX jobs_lease;
DROP INDEX jobs_worker;
DROP INDEX jobs_finished;
CREATE INDEX jobs_active ON jobs (worker) WHERE state = 'active';
CREATE INDEX jobs_done ON jobs (state, finished_at) INCLUDE (queue)
    WHERE state IN ('succeeded', 'failed', 'dead', 'cancelled');
