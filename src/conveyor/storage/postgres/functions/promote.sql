-- Scheduled and retrying jobs whose time has come → pending, oldest first; rows another
-- transaction holds are skipped. Aggregation members (group_key set) are left to
-- postgres/groups.py, which puts them back into their group. Returns how many moved.
CREATE OR REPLACE FUNCTION promote(p_now float8, p_limit integer) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
DECLARE
    v_now float8 := clock_now(p_now);
    moved integer;
    b_ids text[];
    b_from text[];
BEGIN
    WITH due AS (
        SELECT id, state FROM jobs WHERE state IN ('scheduled', 'retrying') AND run_at <= v_now
            AND group_key IS NULL
        ORDER BY run_at LIMIT p_limit FOR UPDATE SKIP LOCKED
    ), u AS (
        UPDATE jobs SET state = 'pending', ready_at = v_now,
            events = jobs.events || event_line(v_now, 'enqueued', 'pending', NULL, NULL,
                                               jobs.attempt)
        FROM due WHERE jobs.id = due.id
        RETURNING jobs.batch_id, due.state AS was
    )
    SELECT count(*), array_agg(u.batch_id) FILTER (WHERE u.batch_id IS NOT NULL),
           array_agg(u.was) FILTER (WHERE u.batch_id IS NOT NULL)
    INTO moved, b_ids, b_from FROM u;
    IF b_ids IS NOT NULL THEN
        PERFORM batch_moves(v_now, b_ids, b_from,
                            array_fill('pending'::text, ARRAY[cardinality(b_ids)]));
    END IF;
    RETURN moved;
END
$$;
