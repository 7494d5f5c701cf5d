-- Jobs whose message the broker gave up on (its delivery limit): each still pending or active
-- ends dead with p_reason, its lease fenced. Returns how many.
CREATE OR REPLACE FUNCTION bury(p_now float8, p_ids text[], p_reason text) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now float8 := clock_now(p_now);
    n integer;
    t_queues text[];
    t_names text[];
    b_ids text[];
    b_from text[];
BEGIN
    WITH o AS (
        SELECT id, state FROM jobs WHERE id = ANY(p_ids) AND state IN ('pending', 'active')
        ORDER BY id FOR UPDATE
    ), u AS (
        UPDATE jobs SET state = 'dead', message = p_reason, finished_at = v_now, token = NULL,
            lease_expires_at = NULL, publish_at = NULL, cancel_requested = false,
            events = jobs.events || event_line(v_now, 'dead', 'dead', to_json(p_reason)::text,
                                               NULL, jobs.attempt)
        FROM o WHERE jobs.id = o.id
        RETURNING jobs.queue, jobs.name, jobs.batch_id, o.state AS was
    )
    SELECT count(*), array_agg(u.queue), array_agg(u.name),
           array_agg(u.batch_id) FILTER (WHERE u.batch_id IS NOT NULL),
           array_agg(u.was) FILTER (WHERE u.batch_id IS NOT NULL)
    INTO n, t_queues, t_names, b_ids, b_from FROM u;
    IF n > 0 THEN
        PERFORM add_totals(v_now, t_queues, t_names,
                           array_fill('dead'::text, ARRAY[cardinality(t_queues)]));
    END IF;
    IF b_ids IS NOT NULL THEN
        PERFORM batch_moves(v_now, b_ids, b_from,
                            array_fill('dead'::text, ARRAY[cardinality(b_ids)]));
    END IF;
    RETURN n;
END
$$;
