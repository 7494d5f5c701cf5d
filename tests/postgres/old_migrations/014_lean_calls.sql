-- conveyor PostgreSQL schema, version 14: dequeue and ack with fewer statements a call.
--
-- Nothing here changes a table: every job is kept.
--
-- Measured first (benchmarks/pg_batch_probe.py, pg_stat_statements and the server's CPU per
-- call size): a call of dequeue or ack cost the server about 0.8 and 1.2 ms whatever it
-- carried, on top of some 50 and 65 µs a job, so at the 30 jobs a worker's call carries in a
-- 5,000-job batch a third of the server's time went to the calls themselves: eleven
-- `array_agg(... ORDER BY ...)` (a sort each) and eleven array appends in dequeue, a loop
-- over the applied acks and a call of add_totals (a function call and its statement) in ack.
--
-- * dequeue: a call whose queues hold no job with a passed deadline and no flow-controlled
--   job (one look at the two partial indexes for all its queues) locks each queue's oldest
--   jobs as before, then leases them all and marks the batches they start with one
--   statement that returns the rows themselves, in queue order and then FIFO. Any other call
--   runs the version 3 function, kept as dequeue_each, as before. The plain lock also skips
--   a gated job or one past its deadline stored since that look, which dequeue_each's plain
--   branch would have leased.
-- * ack: the outcome totals are added in the ack's own statement (as add_totals adds them:
--   rows in key order), and the replies are all true without a loop when every ack applied.
--
-- Locks are taken in the same order as before: jobs, outcome totals, batches (in id order).

ALTER FUNCTION dequeue(float8, text[], text, integer, float8) RENAME TO dequeue_each;

CREATE FUNCTION dequeue(p_now float8, p_queues text[], p_worker text, p_count integer,
                        p_lease float8)
RETURNS TABLE (id text, name text, queue text, payload text, token text, attempt integer,
               errors integer, max_retries integer, timeout float8, batch_id text,
               recoveries integer)
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
#variable_conflict use_column
DECLARE
    v_now float8 := clock_now(p_now);
    q text;
    seen text[] := '{}';
    need integer := p_count;
    ids text[];
    all_ids text[] := '{}';
BEGIN
    IF EXISTS (SELECT 1 FROM jobs WHERE state = 'pending' AND queue = ANY(p_queues)
               AND deadline IS NOT NULL AND deadline < v_now)
       OR EXISTS (SELECT 1 FROM jobs WHERE state = 'pending' AND gated
                  AND queue = ANY(p_queues)) THEN
        RETURN QUERY SELECT * FROM dequeue_each(v_now, p_queues, p_worker, p_count, p_lease);
        RETURN;
    END IF;
    FOREACH q IN ARRAY p_queues LOOP
        CONTINUE WHEN q = ANY(seen);
        seen := seen || q;
        EXIT WHEN need <= 0;
        SELECT array_agg(s.id) INTO ids FROM (
            SELECT id FROM jobs
            WHERE state = 'pending' AND queue = q AND NOT gated
              AND (deadline IS NULL OR deadline >= v_now)
              AND NOT coalesce((SELECT paused FROM queues WHERE name = q), false)
            ORDER BY ready_at, seq LIMIT need FOR UPDATE SKIP LOCKED) AS s;
        CONTINUE WHEN ids IS NULL;
        all_ids := all_ids || ids;
        need := need - cardinality(ids);
    END LOOP;
    IF cardinality(all_ids) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH leased AS (
        UPDATE jobs SET state = 'active', attempt = attempt + 1, worker = p_worker,
            token = replace(gen_random_uuid()::text, '-', ''),
            lease_expires_at = v_now + p_lease, started_at = v_now,
            cancel_requested = false,
            events = events || event_line(v_now, 'started', 'active', NULL, p_worker,
                                          attempt + 1)
        WHERE id = ANY(all_ids)  -- locked above, still pending
        RETURNING id, name, queue, payload, token, attempt, errors, max_retries,
                  timeout, batch_id, recoveries, ready_at, seq
    ), starts AS (  -- a batch's first lease sets its started_at; rows locked in id order
        SELECT b.id FROM batches b
        WHERE b.id IN (SELECT l.batch_id FROM leased l) AND b.started_at IS NULL
        ORDER BY b.id FOR UPDATE
    ), started AS (
        UPDATE batches SET started_at = v_now FROM starts
        WHERE batches.id = starts.id AND batches.started_at IS NULL
    )
    SELECT l.id, l.name, l.queue, l.payload, l.token, l.attempt, l.errors, l.max_retries,
           l.timeout, l.batch_id, l.recoveries
    FROM leased l ORDER BY array_position(p_queues, l.queue), l.ready_at, l.seq;
END
$$;

CREATE OR REPLACE FUNCTION ack(
    p_now float8, p_ids text[], p_tokens text[], p_outcomes text[], p_states text[],
    p_kinds text[], p_messages text[], p_message_json text[], p_data text[], p_counted text[],
    p_cancels boolean[], p_cancel_messages text[], p_cancel_message_json text[],
    p_cancel_data text[], p_errors integer[], p_results text[], p_progress text[],
    p_retry_in float8[], p_events text[])
RETURNS boolean[]
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
DECLARE
    v_now float8 := clock_now(p_now);
    ok boolean[];
    won_ids text[];
    won_ords integer[];
    b_ids text[];
    b_to text[];
BEGIN
    IF coalesce(cardinality(p_ids), 0) = 0 THEN
        RETURN '{}';
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
    ), all_time AS (  -- outcome totals, as add_totals adds them (rows in key order)
        INSERT INTO job_totals AS t (queue, name, processed, failed, dead, retried)
        SELECT queue, name, count(*) FILTER (WHERE counted = 'processed'),
               count(*) FILTER (WHERE counted = 'failed'),
               count(*) FILTER (WHERE counted = 'dead'), count(*) FILTER (WHERE counted = 'retried')
        FROM u WHERE counted IS NOT NULL
        GROUP BY queue, name ORDER BY queue, name
        ON CONFLICT (queue, name) DO UPDATE SET processed = t.processed + excluded.processed,
            failed = t.failed + excluded.failed, dead = t.dead + excluded.dead,
            retried = t.retried + excluded.retried
    ), per_minute AS (
        INSERT INTO minute_totals AS m (queue, minute, processed, failed, dead, retried)
        SELECT queue, floor(v_now / 60)::bigint,
               count(*) FILTER (WHERE counted = 'processed'),
               count(*) FILTER (WHERE counted = 'failed'),
               count(*) FILTER (WHERE counted = 'dead'), count(*) FILTER (WHERE counted = 'retried')
        FROM u WHERE counted IS NOT NULL
        GROUP BY queue ORDER BY queue
        ON CONFLICT (queue, minute) DO UPDATE SET processed = m.processed + excluded.processed,
            failed = m.failed + excluded.failed, dead = m.dead + excluded.dead,
            retried = m.retried + excluded.retried
    )
    SELECT array_agg(u.id), array_agg(u.ord::integer),
           array_agg(u.batch_id) FILTER (WHERE u.batch_id IS NOT NULL),
           array_agg(u.state) FILTER (WHERE u.batch_id IS NOT NULL)
    INTO won_ids, won_ords, b_ids, b_to FROM u;
    -- Refusals, after the applied acks (as on every backend): the state the job was in when
    -- the ack came, none when an earlier ack of this call had just ended the attempt. When
    -- every ack applied there is none, and no statement to run.
    IF coalesce(cardinality(won_ords), 0) < cardinality(p_ids) THEN
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
        SELECT array_agg(w.ord IS NOT NULL ORDER BY a.ord) INTO ok
        FROM generate_series(1, cardinality(p_ids)) AS a(ord)
        LEFT JOIN unnest(won_ords) AS w(ord) ON w.ord = a.ord;
    ELSE
        ok := array_fill(true, ARRAY[cardinality(p_ids)]);
    END IF;
    IF b_ids IS NOT NULL THEN
        PERFORM batch_moves(v_now, b_ids, array_fill('active'::text, ARRAY[cardinality(b_ids)]),
                            b_to);
    END IF;
    RETURN ok;
END
$$;
