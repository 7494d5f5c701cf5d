-- Scheduled and retrying jobs whose time has come → pending, oldest first; rows another
-- transaction holds are skipped. Aggregation members (group_key set) are left to
-- postgres/groups.py, which puts them back into their group. Returns how many moved. Then
-- aging (storage/lineup.py's `aged`): a pending job whose age_next came gains one point of
-- priority per `aging` seconds since, up to 100, where it stops aging.
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
    UPDATE jobs SET priority = least(100, priority + a.steps),
        age_next = CASE WHEN priority + a.steps < 100 THEN age_next + a.steps * aging END
    FROM (SELECT id, floor((v_now - age_next) / aging)::integer + 1 AS steps FROM jobs
          WHERE state = 'pending' AND age_next IS NOT NULL AND age_next <= v_now
          LIMIT p_limit FOR UPDATE SKIP LOCKED) AS a
    WHERE jobs.id = a.id;
    RETURN moved;
END
$$;
