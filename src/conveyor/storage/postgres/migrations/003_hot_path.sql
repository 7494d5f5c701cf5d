-- conveyor PostgreSQL schema, version 3: indexes the hot path cannot be misled by, and
-- fewer statements per call in the hot-path functions.
--
-- Upgrades in place: every job is kept; indexes, functions and the batch counters' meaning
-- change (the new indexes are built in this migration's transaction, which holds writers
-- back for as long as building them takes: about 3 s per million jobs on a small machine).
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
-- * Vacuum as often on a table of a million finished jobs as on an empty one. A lease walks
--   jobs_ready from the oldest pending job; the entries of jobs already leased stay at its
--   head until VACUUM removes them, and autovacuum's default trigger (20% of the table
--   changed) grows with the finished jobs kept: 200,000 changes on a million rows, so the
--   head of jobs_ready grew for minutes and every lease walked it. A fixed threshold keeps
--   it short whatever the table holds (VACUUM skips the all-visible pages of finished jobs).
ALTER TABLE jobs SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
                      autovacuum_vacuum_insert_scale_factor = 0,
                      autovacuum_vacuum_insert_threshold = 10000);
CREATE INDEX jobs_active ON jobs (worker) WHERE state = 'active';
CREATE INDEX jobs_done ON jobs (state, finished_at) INCLUDE (queue)
    WHERE state IN ('succeeded', 'failed', 'dead', 'cancelled');

-- The functions were replaced with the same arguments and results (../functions/enqueue.sql,
-- dequeue_each.sql, ack.sql, add_totals.sql, batch_moves.sql hold them as they are now). Each
-- statement a PL/pgSQL function runs costs an executor start and end, which for the small
-- calls of the hot path (one job enqueued, eight leased or acknowledged) weighed more than
-- the rows they touch (perf on the server). So:
-- * enqueue tests for batches and unique keys on the arrays (a PL/pgSQL expression, no
--   statement) and registers new queues in its INSERT statement;
-- * dequeue collects the leased rows into arrays with the UPDATE that leases them and
--   returns them with one statement, instead of one RETURN QUERY per job, and checks for
--   expired and flow-controlled jobs in one statement;
-- * ack writes the ack_refused events only when some ack was refused;
-- * add_totals updates both totals tables in one statement;
-- * batch counters: a lease no longer writes the batch's row. Every dequeue and every ack of
--   a batch's jobs used to update that one row, so the worker's fetcher and acker (and every
--   worker process on the batch) queued behind each other's row lock. `n_pending` now counts
--   the batch's pending and active jobs together and `n_active` stays 0; readers count the
--   active ones on jobs_batch (at most the workers' slots) and subtract them
--   (storage/postgres/batches.py, BATCH_FROM). Only the first lease writes the row, to set
--   started_at.

UPDATE batches SET n_pending = n_pending + n_active, n_active = 0 WHERE n_active <> 0;
