-- Recover active jobs whose attempt was lost (the caller has locked them): back to pending
-- (`recovered`, not an error attempt), dead once recovered more than `p_max` times (a
-- poison job), cancelled when a cancel request was waiting. `p_why` says how the attempt was
-- lost and `p_cancelled` is the message of a job a cancel request then ends
-- (storage/rules.py). Returns how many went back to pending.
CREATE OR REPLACE FUNCTION recover(p_now float8, p_ids text[], p_max integer, p_why text,
                                   p_cancelled text) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
DECLARE
    back integer;
    t_queues text[];
    t_names text[];
    b_ids text[];
    b_to text[];
BEGIN
    WITH r AS (
        SELECT id,
            CASE WHEN cancel_requested THEN 'cancelled'
                 WHEN recoveries + 1 <= p_max THEN 'pending' ELSE 'dead' END AS to_state,
            CASE WHEN cancel_requested THEN p_cancelled
                 WHEN recoveries + 1 <= p_max THEN p_why
                 ELSE 'recovered ' || (recoveries + 1) || ' times (poison job?)' END AS msg
        FROM jobs WHERE id = ANY(p_ids) AND state = 'active'
    ), u AS (
        UPDATE jobs SET state = r.to_state, recoveries = jobs.recoveries + 1,
            message = CASE WHEN r.to_state = 'pending' THEN jobs.message ELSE r.msg END,
            ready_at = CASE WHEN r.to_state = 'pending' THEN p_now ELSE jobs.ready_at END,
            finished_at = CASE WHEN r.to_state = 'pending' THEN NULL ELSE p_now END,
            token = NULL, lease_expires_at = NULL,
            cancel_requested = CASE WHEN r.to_state = 'dead' THEN false
                                    ELSE jobs.cancel_requested END,
            events = jobs.events || event_line(p_now,
                CASE r.to_state WHEN 'pending' THEN 'recovered' ELSE r.to_state END,
                r.to_state, to_json(r.msg)::text, NULL, jobs.attempt)
        FROM r WHERE jobs.id = r.id
        RETURNING jobs.queue, jobs.name, jobs.batch_id, r.to_state
    )
    SELECT count(*) FILTER (WHERE u.to_state = 'pending'),
           array_agg(u.queue) FILTER (WHERE u.to_state = 'dead'),
           array_agg(u.name) FILTER (WHERE u.to_state = 'dead'),
           array_agg(u.batch_id) FILTER (WHERE u.batch_id IS NOT NULL),
           array_agg(u.to_state) FILTER (WHERE u.batch_id IS NOT NULL)
    INTO back, t_queues, t_names, b_ids, b_to FROM u;
    IF t_queues IS NOT NULL THEN
        PERFORM add_totals(p_now, t_queues, t_names,
                           array_fill('dead'::text, ARRAY[cardinality(t_queues)]));
    END IF;
    IF b_ids IS NOT NULL THEN
        PERFORM batch_moves(p_now, b_ids, array_fill('active'::text, ARRAY[cardinality(b_ids)]),
                            b_to);
    END IF;
    RETURN back;
END
$$;
