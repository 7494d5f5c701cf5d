-- conveyor PostgreSQL schema, version 17: a broker's relay and start with fewer statements.
--
-- Nothing here changes a table: every job is kept.
--
-- Measured first (track_functions during a 10,000-job drain through RabbitMQ,
-- benchmarks/broker_probe.py): start cost the server 81-92 µs a job against dequeue's 59,
-- for the same lease; publish_due 47-50 µs a job to pick and stamp. Version 13's start ran
-- thirteen array_agg over the leased rows, a batch_moves call and an unnest to answer;
-- publish_due picked the jobs with one statement and stamped them, looked up again by id,
-- with the next.
--
-- * start: one statement locks the call's plain deliveries (pending, ungated, in time, in a
--   queue not paused) in id order. When that is every delivery, each named once (the usual
--   call), the next statement leases them, marks the batches they start (rows locked in id
--   order, as dequeue marks them) and returns the replies in the deliveries' order. Any other
--   call goes on through version 13's function, kept as start_set, which locks the same rows
--   again (already held) and answers as before.
-- * publish_due: the jobs are picked, locked and stamped by one statement.

ALTER FUNCTION start(float8, text, text[], boolean[], text[], text, float8, integer, text, text)
    RENAME TO start_set;

CREATE FUNCTION start(p_now float8, p_queue text, p_ids text[], p_redelivered boolean[],
                      p_messages text[], p_worker text, p_lease float8, p_max integer, p_why text,
                      p_cancelled text)
RETURNS TABLE (kind text, id text, name text, queue text, payload text, token text,
               attempt integer, errors integer, max_retries integer, timeout float8,
               batch_id text, recoveries integer)
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
#variable_conflict use_column
DECLARE
    v_now float8 := clock_now(p_now);
    n integer := coalesce(cardinality(p_ids), 0);
    plain integer;
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    -- The state test matches no partial index: the generic plan would otherwise walk every
    -- pending job of jobs_ready instead of looking the ids up (as in dequeue).
    SELECT count(*) INTO plain FROM (
        SELECT jobs.id FROM jobs WHERE jobs.id = ANY(p_ids)
            AND coalesce(jobs.state, '') = 'pending'
            AND NOT jobs.gated AND (jobs.deadline IS NULL OR jobs.deadline >= v_now)
            AND NOT coalesce((SELECT paused FROM queues WHERE name = p_queue), false)
        ORDER BY jobs.id FOR UPDATE) AS k;
    IF plain = n THEN  -- every delivery is a distinct plain job, locked above
        RETURN QUERY
        WITH leased AS (
            UPDATE jobs SET state = 'active', attempt = attempt + 1, worker = p_worker,
                token = replace(gen_random_uuid()::text, '-', '') || coalesce('#' || f.msg, ''),
                lease_expires_at = v_now + p_lease, started_at = v_now, publish_at = NULL,
                cancel_requested = false,
                events = events || event_line(v_now, 'started', 'active', NULL, p_worker,
                                              attempt + 1)
            FROM unnest(p_ids, p_messages) WITH ORDINALITY AS f(id, msg, pos)
            WHERE jobs.id = f.id
            RETURNING f.pos, jobs.id, jobs.name, jobs.queue, jobs.payload, jobs.token,
                      jobs.attempt, jobs.errors, jobs.max_retries, jobs.timeout, jobs.batch_id,
                      jobs.recoveries
        ), starts AS (  -- a batch's first lease sets its started_at; rows locked in id order
            SELECT b.id FROM batches b
            WHERE b.id IN (SELECT l.batch_id FROM leased l) AND b.started_at IS NULL
            ORDER BY b.id FOR UPDATE
        ), started AS (
            UPDATE batches SET started_at = v_now FROM starts
            WHERE batches.id = starts.id AND batches.started_at IS NULL
        )
        SELECT 'started'::text, l.id, l.name, l.queue, l.payload, l.token, l.attempt,
               l.errors, l.max_retries, l.timeout, l.batch_id, l.recoveries
        FROM leased l ORDER BY l.pos;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM start_set(p_now, p_queue, p_ids, p_redelivered, p_messages,
                                         p_worker, p_lease, p_max, p_why, p_cancelled);
END
$$;

CREATE OR REPLACE FUNCTION publish_due(p_now float8, p_queue text, p_count integer,
                                       p_after float8)
RETURNS text[]
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
DECLARE
    v_now float8 := clock_now(p_now);
    ids text[];
BEGIN
    WITH due AS (
        SELECT id, ready_at, seq FROM jobs WHERE state = 'pending' AND queue = p_queue
            AND NOT coalesce((SELECT paused FROM queues WHERE name = p_queue), false)
            AND (publish_at IS NULL OR publish_at BETWEEN 0 AND v_now
                 OR (publish_at < 0 AND flow_admits(v_now, id, false)))
        ORDER BY ready_at, seq LIMIT p_count FOR UPDATE SKIP LOCKED
    ), stamped AS (
        UPDATE jobs SET publish_at = v_now + p_after FROM due WHERE jobs.id = due.id
        RETURNING due.id, due.ready_at, due.seq
    )
    SELECT array_agg(s.id ORDER BY s.ready_at, s.seq) INTO ids FROM stamped s;
    RETURN coalesce(ids, '{}');
END
$$;
