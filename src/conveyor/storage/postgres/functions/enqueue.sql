-- Enqueue: one call per chunk of jobs, one array per column (all of one length). Text
-- columns arrive as stored (U+0000 escaped, storage/postgres/text.py). Returns, in input
-- order, the id standing for each job (its own, or the holder of its unique key) and whether
-- this call created it; or a single row naming a batch that cannot take jobs (`problem`
-- 'missing' or 'closed'), with nothing written. Unique keys take a transaction advisory lock
-- each (in key order), so two clients enqueueing one key at once create one job. Batches and
-- unique keys are tested on the arrays, and new queues registered in the INSERT statement:
-- each statement a PL/pgSQL function runs costs an executor start and end.
CREATE OR REPLACE FUNCTION enqueue(
    p_now float8, p_ids text[], p_names text[], p_queues text[], p_payloads text[],
    p_max_retries integer[], p_timeouts float8[], p_deadlines float8[], p_run_ats float8[],
    p_batch_ids text[], p_flows text[], p_unique_keys text[], p_unique_fors float8[],
    p_concurrency_keys text[], p_concurrency_limits integer[], p_order_keys text[],
    p_rate_keys text[], p_rate_limits integer[], p_rate_periods float8[])
RETURNS TABLE (stands_for text, created boolean, problem text)
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
DECLARE
    v_now float8 := clock_now(p_now);
    n integer := coalesce(cardinality(p_ids), 0);
    keep boolean[] := array_fill(true, ARRAY[coalesce(cardinality(p_ids), 0)]);
    stand text[] := p_ids;
    taken jsonb := '{}';
    bad record;
    holder text;
    made text[];
    moved_b text[];
    moved_s text[];
    i integer;
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    -- Tests on the arrays alone are PL/pgSQL expressions, evaluated without a statement.
    IF cardinality(array_remove(p_batch_ids, NULL)) > 0 THEN
        SELECT w.id, x.id IS NULL AS missing INTO bad
        FROM (SELECT DISTINCT unnest(p_batch_ids) AS id) AS w LEFT JOIN batches x ON x.id = w.id
        WHERE w.id IS NOT NULL AND (x.id IS NULL OR x.finished_at IS NOT NULL)
        ORDER BY w.id LIMIT 1;
        IF FOUND THEN
            RETURN QUERY SELECT bad.id, false,
                CASE WHEN bad.missing THEN 'missing' ELSE 'closed' END;
            RETURN;
        END IF;
    END IF;
    IF cardinality(array_remove(p_unique_keys, NULL)) > 0 THEN
        PERFORM pg_advisory_xact_lock(hashtext('conveyor-unique:' || k))
        FROM (SELECT DISTINCT k FROM unnest(p_unique_keys) AS k WHERE k IS NOT NULL ORDER BY k) s;
        FOR i IN 1..n LOOP
            CONTINUE WHEN p_unique_keys[i] IS NULL;
            IF p_ids[i] = ANY(p_ids[1:i - 1]) OR EXISTS (SELECT 1 FROM jobs WHERE id = p_ids[i]) THEN
                keep[i] := false;  -- stored already: stands for itself, not created
                CONTINUE;
            END IF;
            holder := taken ->> p_unique_keys[i];
            IF holder IS NULL THEN
                SELECT u.job_id INTO holder FROM unique_locks u LEFT JOIN jobs j ON j.id = u.job_id
                WHERE u.key = p_unique_keys[i] AND (u.until > v_now OR (j.state IS NOT NULL
                    AND j.state NOT IN ('succeeded', 'failed', 'dead', 'cancelled')));
            END IF;
            IF holder IS NOT NULL THEN
                keep[i] := false;
                stand[i] := holder;
                CONTINUE;
            END IF;
            INSERT INTO unique_locks (key, job_id, until)
            VALUES (p_unique_keys[i], p_ids[i], v_now + coalesce(p_unique_fors[i], 0))
            ON CONFLICT (key) DO UPDATE SET job_id = excluded.job_id, until = excluded.until;
            taken := taken || jsonb_build_object(p_unique_keys[i], p_ids[i]);
        END LOOP;
    END IF;
    WITH r AS (
        SELECT u.*, CASE WHEN u.run_at IS NOT NULL AND u.run_at > v_now THEN 'scheduled'
                         ELSE 'pending' END AS state
        FROM unnest(p_ids, p_names, p_queues, p_payloads, p_max_retries, p_timeouts,
                    p_deadlines, p_run_ats, p_batch_ids, p_flows, p_unique_keys,
                    p_concurrency_keys, p_concurrency_limits, p_order_keys, p_rate_keys,
                    p_rate_limits, p_rate_periods)
            WITH ORDINALITY AS u(id, name, queue, payload, max_retries, timeout, deadline,
                                 run_at, batch_id, flow, unique_key, ckey, climit, okey, rkey,
                                 rlimit, rperiod, ord)
    ), ins AS (
        INSERT INTO jobs (id, name, queue, payload, state, max_retries, timeout, deadline,
            created_at, run_at, ready_at, batch_id, flow, unique_key, concurrency_key,
            concurrency_limit, order_key, rate_key, rate_limit, rate_period, gated, events)
        SELECT r.id, r.name, r.queue, r.payload, r.state, coalesce(r.max_retries, 25),
            r.timeout, r.deadline, v_now, r.run_at,
            CASE WHEN r.state = 'pending' THEN v_now END, r.batch_id, r.flow, r.unique_key,
            r.ckey, coalesce(r.climit, 0), r.okey, r.rkey, coalesce(r.rlimit, 0),
            coalesce(r.rperiod, 0), r.ckey IS NOT NULL OR r.okey IS NOT NULL OR r.rkey IS NOT NULL,
            event_line(v_now, CASE WHEN r.state = 'pending' THEN 'enqueued' ELSE 'scheduled' END,
                       r.state)
        FROM r WHERE keep[r.ord::integer] ORDER BY r.ord  -- seq follows the input order
        ON CONFLICT (id) DO NOTHING
        RETURNING id, batch_id, state
    ), new_queues AS (  -- in the same statement: one statement fewer per enqueue
        INSERT INTO queues (name)
        SELECT DISTINCT q FROM unnest(p_queues) AS q
        WHERE NOT EXISTS (SELECT 1 FROM queues WHERE name = q)
        ON CONFLICT DO NOTHING
    )
    SELECT array_agg(ins.id), array_agg(ins.batch_id) FILTER (WHERE ins.batch_id IS NOT NULL),
           array_agg(ins.state) FILTER (WHERE ins.batch_id IS NOT NULL)
    INTO made, moved_b, moved_s FROM ins;
    IF moved_b IS NOT NULL THEN
        PERFORM batch_moves(v_now, moved_b, array_fill(NULL::text, ARRAY[cardinality(moved_b)]),
                            moved_s);
    END IF;
    -- An id stored before (or by another transaction since): not created by this call; of
    -- one id given twice, only the first is.
    RETURN QUERY
    SELECT CASE WHEN keep[u.ord::integer] THEN u.id ELSE stand[u.ord::integer] END,
           keep[u.ord::integer] AND c.id IS NOT NULL
               AND u.ord = min(u.ord) FILTER (WHERE keep[u.ord::integer])
                               OVER (PARTITION BY u.id),
           NULL::text
    FROM unnest(p_ids) WITH ORDINALITY AS u(id, ord)
    LEFT JOIN unnest(made) AS c(id) ON c.id = u.id
    ORDER BY u.ord;
END
$$;
