-- Acknowledge a group of jobs (a worker's group commit) in one call, fenced by lease token.
-- Per ack (arrays in ack order): the outcome as given (state, final event kind, message as
-- stored and as JSON, event data as JSON, what it counts as in the totals), whether a
-- pending cancel request turns it into `cancelled` (`cancels`) and the message and data it
-- then has, the errors it adds, result, progress, retry delay and the events the job wrote.
-- Rows are locked in id order (no deadlock between ackers). Of the acks naming one job only
-- the first whose token is its live lease applies; every other ack of a stored job is
-- refused with an `ack_refused` event. Returns applied-or-refused per ack, in order.
-- A durable job's suspension (state `scheduled`, docs/durable.md) carries its wake time, the
-- storage clock's, in `p_retry_in`; one whose wait was answered while it left its worker is
-- made pending at once (durable_wake). A snoozed job (RetryAfter, also `scheduled`, event
-- `snoozed`) carries its delay in seconds there, as a retry does.
--
-- The applied acks of jobs with a breaker key move their breakers (breaker.sql) in the same
-- call; the others pay a column read. An error counts there when the run raised: `p_unran`
-- lists the places (1-based) of the acks of jobs that never ran (unreadable, unknown), whose
-- errors do not; the signature without it, for a call with none, passes an empty list.
--
-- Each ack finds its job by one primary-key probe: a join testing `state = 'active'` matched
-- the partial index jobs_active, whose generic plan walked every entry leased since the last
-- VACUUM. The outcome totals are added in the ack's own statement, and the replies are all
-- true without a statement when every ack applied. Locks are taken in one order: jobs,
-- outcome totals, batches (in id order).
CREATE OR REPLACE FUNCTION ack(
    p_now float8, p_ids text[], p_tokens text[], p_outcomes text[], p_states text[],
    p_kinds text[], p_messages text[], p_message_json text[], p_data text[], p_counted text[],
    p_cancels boolean[], p_cancel_messages text[], p_cancel_message_json text[],
    p_cancel_data text[], p_errors integer[], p_results text[], p_progress text[],
    p_retry_in float8[], p_events text[], p_unran integer[])
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
    s_ids text[];
    k_ords integer[];
    k_ids text[];
    k_touches text[];
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
            run_at = CASE WHEN NOT w.cx AND (w.state = 'retrying' OR w.kind = 'snoozed')
                          THEN v_now + w.retry_in
                          WHEN NOT w.cx AND w.state = 'scheduled' THEN w.retry_in
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
        RETURNING jobs.id, w.ord, jobs.queue, jobs.name, jobs.batch_id, jobs.state, w.kind,
                  CASE WHEN w.cx THEN NULL ELSE w.counted END AS counted, jobs.breaker_key,
                  -- what the ack tells the job's breaker (breakers.breaker_touch)
                  CASE WHEN w.cx THEN NULL
                       WHEN w.errs > 0 THEN CASE WHEN w.ord::integer = ANY(p_unran) THEN NULL
                                                 ELSE 'error' END
                       WHEN w.state IN ('succeeded', 'failed') THEN 'answer'
                       WHEN w.kind = 'snoozed' THEN 'snooze' END AS touch
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
           array_agg(u.state) FILTER (WHERE u.batch_id IS NOT NULL),
           array_agg(u.id) FILTER (WHERE u.state = 'scheduled' AND u.kind = 'suspended'),
           array_agg(u.ord::integer ORDER BY u.ord) FILTER (WHERE u.breaker_key IS NOT NULL),
           array_agg(u.id ORDER BY u.ord) FILTER (WHERE u.breaker_key IS NOT NULL),
           array_agg(u.touch ORDER BY u.ord) FILTER (WHERE u.breaker_key IS NOT NULL)
    INTO won_ids, won_ords, b_ids, b_to, s_ids, k_ords, k_ids, k_touches FROM u;
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
    IF s_ids IS NOT NULL THEN
        PERFORM durable_wake(v_now, s_ids);
    END IF;
    IF k_ids IS NOT NULL THEN
        PERFORM breaker_acks(p_now, k_ids, k_touches, k_ords, p_retry_in, p_message_json,
                             p_data);
    END IF;
    RETURN ok;
END
$$;

-- Without `p_unran`: every ack's job ran (the usual call; and a worker of an older release
-- still running during an upgrade). LANGUAGE sql, no settings: inlined into the caller's
-- statement, checked against the function above when it is created.
CREATE OR REPLACE FUNCTION ack(
    p_now float8, p_ids text[], p_tokens text[], p_outcomes text[], p_states text[],
    p_kinds text[], p_messages text[], p_message_json text[], p_data text[], p_counted text[],
    p_cancels boolean[], p_cancel_messages text[], p_cancel_message_json text[],
    p_cancel_data text[], p_errors integer[], p_results text[], p_progress text[],
    p_retry_in float8[], p_events text[])
RETURNS boolean[]
LANGUAGE sql AS $$
    SELECT ack(p_now, p_ids, p_tokens, p_outcomes, p_states, p_kinds, p_messages,
               p_message_json, p_data, p_counted, p_cancels, p_cancel_messages,
               p_cancel_message_json, p_cancel_data, p_errors, p_results, p_progress,
               p_retry_in, p_events, '{}'::integer[])
$$;
