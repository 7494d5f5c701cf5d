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

-- Batch counters, cheaper per call (the same counters, completion and callbacks):
-- * a lease (every move pending -> active, the common call from dequeue) moves no counter
--   (migration 3) and only sets started_at on the batch's first one: it skips the per-state
--   aggregate and goes to that one conditional UPDATE;
-- * an ack updates each batch's row once per call, as before, and reads back from that UPDATE
--   (the row locked) whether completion or a callback could be due: settle_batch (another
--   read of the row, its callbacks parsed) runs only then, or when no counter moved. Whether
--   a batch completes and which callbacks fire is still decided under the row's lock, once.
CREATE OR REPLACE FUNCTION batch_moves(p_now float8, p_batches text[], p_from text[], p_to text[])
RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    d record;
    v_b text;
    v_settle boolean;
BEGIN
    IF p_from <@ ARRAY['pending'] AND p_to <@ ARRAY['active'] THEN  -- leases only (no NULLs)
        FOR v_b IN SELECT DISTINCT b FROM unnest(p_batches) AS b WHERE b IS NOT NULL ORDER BY b
        LOOP
            UPDATE batches SET started_at = p_now WHERE id = v_b AND started_at IS NULL;
        END LOOP;
        RETURN;
    END IF;
    FOR d IN
        SELECT b,
            count(*) FILTER (WHERE f IS NULL) - count(*) FILTER (WHERE t IS NULL) AS total,
            count(*) FILTER (WHERE t = 'scheduled') - count(*) FILTER (WHERE f = 'scheduled') AS scheduled,
            count(*) FILTER (WHERE t = 'pending') - count(*) FILTER (WHERE f = 'pending') AS pending,
            count(*) FILTER (WHERE t = 'retrying') - count(*) FILTER (WHERE f = 'retrying') AS retrying,
            count(*) FILTER (WHERE t = 'succeeded') - count(*) FILTER (WHERE f = 'succeeded') AS succeeded,
            count(*) FILTER (WHERE t = 'failed') - count(*) FILTER (WHERE f = 'failed') AS failed,
            count(*) FILTER (WHERE t = 'dead') - count(*) FILTER (WHERE f = 'dead') AS dead,
            count(*) FILTER (WHERE t = 'cancelled') - count(*) FILTER (WHERE f = 'cancelled') AS cancelled,
            bool_or(f IS NULL OR t IS NULL
                    OR f IN ('succeeded', 'failed', 'dead', 'cancelled')
                    OR t IN ('succeeded', 'failed', 'dead', 'cancelled')) AS settles,
            bool_or(starts) AS starts
        FROM (SELECT u.b, CASE WHEN u.f = 'active' THEN 'pending' ELSE u.f END AS f,
                     CASE WHEN u.t = 'active' THEN 'pending' ELSE u.t END AS t,
                     u.t = 'active' AS starts
              FROM unnest(p_batches, p_from, p_to) AS u(b, f, t)) AS m
        WHERE b IS NOT NULL GROUP BY b ORDER BY b
    LOOP
        v_settle := true;
        IF d.total <> 0 OR d.scheduled <> 0 OR d.pending <> 0
                OR d.retrying <> 0 OR d.succeeded <> 0 OR d.failed <> 0 OR d.dead <> 0
                OR d.cancelled <> 0 THEN
            -- settle_batch acts only on a batch that is complete, was complete (re-opened),
            -- or has a dead job and callbacks: read off the row this UPDATE locked
            UPDATE batches SET total = total + d.total, n_scheduled = n_scheduled + d.scheduled,
                n_pending = n_pending + d.pending,
                n_retrying = n_retrying + d.retrying, n_succeeded = n_succeeded + d.succeeded,
                n_failed = n_failed + d.failed, n_dead = n_dead + d.dead,
                n_cancelled = n_cancelled + d.cancelled,
                started_at = CASE WHEN d.starts THEN coalesce(started_at, p_now)
                                  ELSE started_at END
            WHERE id = d.b
            RETURNING (closed AND n_succeeded + n_failed + n_dead + n_cancelled >= total)
                      OR finished_at IS NOT NULL
                      OR (n_dead > 0 AND callbacks NOT IN ('', '{}'))
            INTO v_settle;
            v_settle := coalesce(v_settle, false);  -- no row: trimmed away, nothing to settle
        ELSIF d.starts THEN
            UPDATE batches SET started_at = p_now WHERE id = d.b AND started_at IS NULL;
        END IF;
        IF d.settles AND v_settle THEN
            PERFORM settle_batch(p_now, d.b);
        END IF;
    END LOOP;
END
$$;

-- ack: as in version 3, except how it finds the acknowledged jobs: one primary-key probe per
-- ack. Written as a join with `j.state = 'active'`, the test matched the partial index
-- jobs_active, and a generic plan made on a table of few jobs (where the planner reckons with
-- one active job) walked that index: a bitmap scan over every entry it holds, one for each job
-- leased since the last VACUUM (autovacuum runs after 10,000 changes, or a minute), so
-- acknowledging a 5,000-job burst read a growing part of them on every call. Joined by id
-- instead, the plan looped over the acknowledged jobs and re-read the unnested arguments for
-- each (quadratic in the acks per call: 2 of the 5.6 ms of an ack of 50 jobs, EXPLAIN
-- ANALYZE through auto_explain).
CREATE OR REPLACE FUNCTION ack(
    p_now float8, p_ids text[], p_tokens text[], p_outcomes text[], p_states text[],
    p_kinds text[], p_messages text[], p_message_json text[], p_data text[], p_counted text[],
    p_cancels boolean[], p_cancel_messages text[], p_cancel_message_json text[],
    p_cancel_data text[], p_errors integer[], p_results text[], p_progress text[],
    p_retry_in float8[], p_events text[])
RETURNS boolean[]
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_now float8 := clock_now(p_now);
    n integer := coalesce(cardinality(p_ids), 0);
    ok boolean[] := array_fill(false, ARRAY[coalesce(cardinality(p_ids), 0)]);
    won_ids text[];
    won_ords integer[];
    t_queues text[];
    t_names text[];
    t_kinds text[];
    b_ids text[];
    b_to text[];
    o integer;
BEGIN
    IF n = 0 THEN
        RETURN ok;
    END IF;
    PERFORM 1 FROM jobs WHERE id = ANY(p_ids) ORDER BY id FOR UPDATE;
    WITH a AS (
        SELECT * FROM unnest(p_ids, p_tokens, p_states, p_kinds, p_messages, p_message_json,
                             p_data, p_counted, p_cancels, p_cancel_messages,
                             p_cancel_message_json, p_cancel_data, p_errors, p_results,
                             p_progress, p_retry_in, p_events)
            WITH ORDINALITY AS a(id, token, state, kind, message, mjson, data, counted,
                                 cancels, cmessage, cmjson, cdata, errs, result, progress,
                                 retry_in, events, ord)
    ), w AS (
        SELECT DISTINCT ON (a.id) a.*, j.cancel_requested AND a.cancels AS cx
        -- one primary-key probe per ack (the LIMIT keeps the planner from turning the
        -- lateral lookup into a join it could order the other way round)
        FROM a CROSS JOIN LATERAL (
            SELECT jj.cancel_requested FROM jobs jj
            WHERE jj.id = a.id AND coalesce(jj.state, '') = 'active' AND jj.token = a.token
            LIMIT 1) AS j
        ORDER BY a.id, a.ord
    ), u AS (
        UPDATE jobs SET
            state = CASE WHEN w.cx THEN 'cancelled' ELSE w.state END,
            errors = jobs.errors + w.errs,
            result = coalesce(w.result, jobs.result),
            message = CASE WHEN w.cx THEN w.cmessage ELSE w.message END,
            progress = coalesce(w.progress, jobs.progress),
            run_at = CASE WHEN NOT w.cx AND w.state = 'retrying' THEN v_now + w.retry_in
                          ELSE jobs.run_at END,
            ready_at = CASE WHEN NOT w.cx AND w.state = 'pending' THEN v_now
                            ELSE jobs.ready_at END,
            finished_at = CASE WHEN w.cx OR w.state IN ('succeeded', 'failed', 'dead',
                                                       'cancelled') THEN v_now END,
            token = NULL, lease_expires_at = NULL,
            events = jobs.events || coalesce(w.events, '') || CASE WHEN w.cx
                THEN event_line(v_now, 'cancelled', 'cancelled', w.cmjson, jobs.worker,
                                jobs.attempt, w.cdata)
                ELSE event_line(v_now, w.kind, w.state, w.mjson, jobs.worker, jobs.attempt,
                                w.data) END
        FROM w WHERE jobs.id = w.id
        RETURNING jobs.id, w.ord, jobs.queue, jobs.name, jobs.batch_id, jobs.state,
                  CASE WHEN w.cx THEN NULL ELSE w.counted END AS counted
    )
    SELECT array_agg(u.id), array_agg(u.ord::integer),
           array_agg(u.queue) FILTER (WHERE u.counted IS NOT NULL),
           array_agg(u.name) FILTER (WHERE u.counted IS NOT NULL),
           array_agg(u.counted) FILTER (WHERE u.counted IS NOT NULL),
           array_agg(u.batch_id) FILTER (WHERE u.batch_id IS NOT NULL),
           array_agg(u.state) FILTER (WHERE u.batch_id IS NOT NULL)
    INTO won_ids, won_ords, t_queues, t_names, t_kinds, b_ids, b_to FROM u;
    FOREACH o IN ARRAY coalesce(won_ords, '{}') LOOP
        ok[o] := true;
    END LOOP;
    -- Refusals, after the applied acks (as on every backend): the state the job was in when
    -- the ack came, none when an earlier ack of this call had just ended the attempt. When
    -- every ack applied there is none, and no statement to run.
    IF coalesce(cardinality(won_ords), 0) < n THEN
    UPDATE jobs SET events = jobs.events || f.lines
    FROM (
        SELECT a.id, string_agg(event_line(v_now, 'ack_refused',
                   CASE WHEN w.ord IS NULL THEN j.state WHEN w.ord < a.ord THEN NULL
                        ELSE 'active' END,
                   to_json('stale lease: ' || a.outcome || ' refused')::text, NULL, 0,
                   json_build_object('token', a.token, 'outcome', a.outcome)::text),
                   '' ORDER BY a.ord) AS lines
        FROM unnest(p_ids, p_tokens, p_outcomes) WITH ORDINALITY AS a(id, token, outcome, ord)
        JOIN jobs j ON j.id = a.id
        LEFT JOIN unnest(won_ids, won_ords) AS w(id, ord) ON w.id = a.id
        WHERE w.ord IS DISTINCT FROM a.ord::integer
        GROUP BY a.id
    ) AS f WHERE jobs.id = f.id;
    END IF;
    IF t_kinds IS NOT NULL THEN
        PERFORM add_totals(v_now, t_queues, t_names, t_kinds);
    END IF;
    IF b_ids IS NOT NULL THEN
        PERFORM batch_moves(v_now, b_ids, array_fill('active'::text, ARRAY[cardinality(b_ids)]),
                            b_to);
    END IF;
    RETURN ok;
END
$$;

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
