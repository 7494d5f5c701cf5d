-- conveyor PostgreSQL schema, version 5: plans that stay good while the jobs table grows.
--
-- Nothing here changes a table: every job is kept.
--
-- The hot-path functions plan their statements once per connection (force_generic_plan,
-- migration 2), at their first call. A worker that starts on an empty or small jobs table (a
-- fresh schema, or a queue just drained: the case of every worker waiting for the next burst)
-- plans `WHERE id = ANY(ids)` (an ack's row locks and its UPDATE, a lease's UPDATE, a
-- heartbeat) as a sequential scan, cheaper than the primary key on a handful of pages; that
-- plan is kept for the connection's life, and when a burst of 5,000 jobs arrives every ack and
-- every lease reads the whole table: 5-7 ms of server time per call (pg_stat_statements over
-- a 5,000-job batch, benchmarks/pg_batch_probe.py), where the index takes a few hundred
-- microseconds. Autovacuum's ANALYZE, which would invalidate the plan, comes a minute later.
--
-- Every statement of these functions reads jobs through an index (their ids, or the partial
-- index of the state they move from), and none is meant to read a whole table. So they plan
-- with sequential scans priced out (`enable_seqscan = off` only while the function runs; a
-- table with no usable index is still scanned): the plan is the index one whatever the
-- table held when the connection made it.

DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace
          AND p.proname IN ('enqueue', 'enqueue_one', 'dequeue', 'flow_pick', 'ack', 'heartbeat',
                            'recover', 'reclaim', 'release_worker', 'promote', 'batch_moves',
                            'settle_batch', 'add_totals')
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET enable_seqscan = off', f);
    END LOOP;
END
$$;
