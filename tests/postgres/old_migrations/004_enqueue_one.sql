-- conveyor PostgreSQL schema, version 5: enqueue_one, the lean call for the most common
-- enqueue, one job without flow control (no unique key). Numbered 5, not 4: another change
-- may add a version 4 at the same time; the runner applies the versions above the schema's in
-- order and needs no consecutive numbers.
--
-- `enqueue(…)` takes 19 arrays and, planned generically, spends more on unnesting them and
-- on its tests of unique keys and batches than on the one row it writes. enqueue_one takes
-- scalars and writes the same row, event line, queue row and batch counters (the NOTIFY comes
-- from the same trigger), and returns the same (stands_for, created, problem) row.

CREATE OR REPLACE FUNCTION enqueue_one(
    p_now float8, p_id text, p_name text, p_queue text, p_payload text,
    p_max_retries integer, p_timeout float8, p_deadline float8, p_run_at float8,
    p_batch_id text)
RETURNS TABLE (stands_for text, created boolean, problem text)
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_now float8 := clock_now(p_now);
    v_state text;
    v_finished float8;
    made integer;
BEGIN
    IF p_batch_id IS NOT NULL THEN
        SELECT b.finished_at INTO v_finished FROM batches b WHERE b.id = p_batch_id;
        IF NOT FOUND THEN
            RETURN QUERY SELECT p_batch_id, false, 'missing'::text;
            RETURN;
        ELSIF v_finished IS NOT NULL THEN
            RETURN QUERY SELECT p_batch_id, false, 'closed'::text;
            RETURN;
        END IF;
    END IF;
    v_state := CASE WHEN p_run_at IS NOT NULL AND p_run_at > v_now THEN 'scheduled'
                    ELSE 'pending' END;
    WITH ins AS (
        INSERT INTO jobs (id, name, queue, payload, state, max_retries, timeout, deadline,
            created_at, run_at, ready_at, batch_id, events)
        VALUES (p_id, p_name, p_queue, p_payload, v_state, coalesce(p_max_retries, 25),
            p_timeout, p_deadline, v_now, p_run_at,
            CASE WHEN v_state = 'pending' THEN v_now END, p_batch_id,
            event_line(v_now, CASE WHEN v_state = 'pending' THEN 'enqueued' ELSE 'scheduled'
                                   END, v_state))
        ON CONFLICT (id) DO NOTHING
        RETURNING 1
    ), new_queue AS (  -- in the same statement, as in enqueue
        INSERT INTO queues (name) SELECT p_queue
        WHERE NOT EXISTS (SELECT 1 FROM queues WHERE name = p_queue)
        ON CONFLICT DO NOTHING
    )
    SELECT count(*) INTO made FROM ins;
    IF made > 0 AND p_batch_id IS NOT NULL THEN
        PERFORM batch_moves(v_now, ARRAY[p_batch_id], ARRAY[NULL::text], ARRAY[v_state]);
    END IF;
    RETURN QUERY SELECT p_id, made > 0, NULL::text;
END
$$;
