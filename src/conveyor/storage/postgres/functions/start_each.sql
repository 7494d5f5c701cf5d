-- Deliveries one by one, for start_set's deliveries that are not plain: kind 'started' (the
-- job leased), 'running' (active under another lease; or a second message in this call),
-- 'skipped' (finished, expired here, or its key breaks the key rule: it ends dead), 'parked'
-- (flow control, an open breaker or a pause holds it back: it waits in the store,
-- publish_at < 0; one started while its breaker is open is the probe, breaker.sql) or
-- 'foreign' (a job of another queue, or an unknown id: the worker drops the delivery and
-- counts it). A redelivered message takes an active job over, as a lease expiry would
-- (recover: 'recovered', dead past p_max), only when the job's token ends with '#' and that
-- message's id: the lease was started by that very message, so its holder's connection died.
-- An older message of a job published again is a duplicate ('running', the holder untouched).
CREATE OR REPLACE FUNCTION start_each(
    p_now float8, p_queue text, p_ids text[], p_redelivered boolean[], p_messages text[],
    p_worker text, p_lease float8, p_max integer, p_why text, p_cancelled text)
RETURNS TABLE (kind text, id text, name text, queue text, payload text, token text,
               attempt integer, errors integer, max_retries integer, timeout float8,
               batch_id text, recoveries integer)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    v_now float8 := clock_now(p_now);
    v_paused boolean := coalesce((SELECT paused FROM queues WHERE name = p_queue), false);
    seen text[] := '{}';
    j text;
    i integer;
    r record;
    l record;
    gate_locked boolean := false;
    b_ids text[] := '{}';
    b_from text[] := '{}';
    b_to text[] := '{}';
BEGIN
    FOR i IN 1 .. coalesce(cardinality(p_ids), 0) LOOP
        j := p_ids[i];
        IF j = ANY(seen) THEN
            RETURN QUERY SELECT 'running'::text, j, NULL::text, NULL::text, NULL::text,
                NULL::text, NULL::int, NULL::int, NULL::int, NULL::float8, NULL::text, NULL::int;
            CONTINUE;
        END IF;
        seen := seen || j;
        SELECT jobs.state, jobs.deadline, jobs.gated, jobs.batch_id AS bid, jobs.token,
               jobs.queue AS q, broken_key(jobs.concurrency_key, jobs.order_key,
                                           jobs.rate_key, jobs.breaker_key) AS why,
               jobs.breaker_key AS bkey INTO r
            FROM jobs WHERE jobs.id = j FOR UPDATE;
        IF NOT FOUND OR r.q <> p_queue THEN  -- not a job of this queue: another app's, say
            RETURN QUERY SELECT 'foreign'::text, j, NULL::text, NULL::text, NULL::text,
                NULL::text, NULL::int, NULL::int, NULL::int, NULL::float8, NULL::text, NULL::int;
            CONTINUE;
        END IF;
        IF FOUND AND r.state = 'active' AND p_redelivered[i]
                AND (p_messages[i] IS NULL
                     OR right(coalesce(r.token, ''), length(p_messages[i]) + 1)
                        = '#' || p_messages[i]) THEN
            PERFORM recover(v_now, ARRAY[j], p_max, p_why, p_cancelled);
            SELECT jobs.state, jobs.deadline, jobs.gated, jobs.batch_id AS bid, jobs.token,
                   jobs.queue AS q, broken_key(jobs.concurrency_key, jobs.order_key,
                                               jobs.rate_key, jobs.breaker_key) AS why,
                   jobs.breaker_key AS bkey INTO r
                FROM jobs WHERE jobs.id = j;
        ELSIF FOUND AND r.state = 'active' THEN
            RETURN QUERY SELECT 'running'::text, j, NULL::text, NULL::text, NULL::text,
                NULL::text, NULL::int, NULL::int, NULL::int, NULL::float8, NULL::text, NULL::int;
            CONTINUE;
        END IF;
        IF NOT FOUND OR r.state <> 'pending' THEN
            RETURN QUERY SELECT 'skipped'::text, j, NULL::text, NULL::text, NULL::text,
                NULL::text, NULL::int, NULL::int, NULL::int, NULL::float8, NULL::text, NULL::int;
            CONTINUE;
        END IF;
        IF r.deadline IS NOT NULL AND r.deadline < v_now THEN
            UPDATE jobs SET state = 'dead', message = 'deadline passed before the job could start',
                finished_at = v_now, token = NULL, lease_expires_at = NULL, publish_at = NULL,
                cancel_requested = false,
                events = events || event_line(v_now, 'expired', 'dead',
                    '"deadline passed before the job could start"', NULL, attempt)
            WHERE jobs.id = j;
            IF r.bid IS NOT NULL THEN
                b_ids := b_ids || r.bid; b_from := b_from || 'pending'::text;
                b_to := b_to || 'dead'::text;
            END IF;
            RETURN QUERY SELECT 'skipped'::text, j, NULL::text, NULL::text, NULL::text,
                NULL::text, NULL::int, NULL::int, NULL::int, NULL::float8, NULL::text, NULL::int;
            CONTINUE;
        END IF;
        IF r.why IS NOT NULL AND NOT v_paused THEN  -- a key that breaks the key rule
            PERFORM end_broken(v_now, j, r.why);
            RETURN QUERY SELECT 'skipped'::text, j, NULL::text, NULL::text, NULL::text,
                NULL::text, NULL::int, NULL::int, NULL::int, NULL::float8, NULL::text, NULL::int;
            CONTINUE;
        END IF;
        IF r.gated AND NOT v_paused AND NOT gate_locked THEN
            PERFORM pg_advisory_xact_lock(hashtext('conveyor-gate:' || current_schema()));
            gate_locked := true;
            v_now := clock_now(p_now);  -- the gates' time, as in dequeue_each
        END IF;
        IF v_paused OR (r.gated AND NOT flow_admits(v_now, j, true)) THEN
            UPDATE jobs SET publish_at = -1 WHERE jobs.id = j;
            RETURN QUERY SELECT 'parked'::text, j, NULL::text, NULL::text, NULL::text,
                NULL::text, NULL::int, NULL::int, NULL::int, NULL::float8, NULL::text, NULL::int;
            CONTINUE;
        END IF;
        UPDATE jobs SET state = 'active', attempt = attempt + 1, worker = p_worker,
            token = replace(gen_random_uuid()::text, '-', '') || coalesce('#' || p_messages[i], ''),
            lease_expires_at = v_now + p_lease, started_at = v_now, publish_at = NULL,
            cancel_requested = false,
            events = events || CASE WHEN breaker_key IS NULL THEN ''
                                    ELSE breaker_probe_line(v_now, breaker_key) END
                || event_line(v_now, 'started', 'active', NULL, p_worker, attempt + 1)
        WHERE jobs.id = j
        RETURNING jobs.id, jobs.name, jobs.queue, jobs.payload, jobs.token, jobs.attempt,
                  jobs.errors, jobs.max_retries, jobs.timeout, jobs.batch_id, jobs.recoveries
        INTO l;
        IF r.bkey IS NOT NULL THEN  -- started while its breaker is open: the probe
            PERFORM breaker_probe(v_now, ARRAY[j]);
        END IF;
        IF l.batch_id IS NOT NULL THEN
            b_ids := b_ids || l.batch_id; b_from := b_from || 'pending'::text;
            b_to := b_to || 'active'::text;
        END IF;
        RETURN QUERY SELECT 'started'::text, l.id, l.name, l.queue, l.payload, l.token,
            l.attempt, l.errors, l.max_retries, l.timeout, l.batch_id, l.recoveries;
    END LOOP;
    IF cardinality(b_ids) > 0 THEN
        PERFORM batch_moves(v_now, b_ids, b_from, b_to);
    END IF;
END
$$;
