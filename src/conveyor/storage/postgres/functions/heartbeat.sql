-- Heartbeat: register (or refresh) the worker, take its pending remote command, and extend
-- every lease it still holds. Returns the command and, per lease still held, its job id and
-- whether a cancel was requested; jobs not returned were lost.
CREATE OR REPLACE FUNCTION heartbeat(p_now float8, p_worker text, p_info text, p_ids text[],
                                     p_tokens text[], p_lease float8)
RETURNS TABLE (command text, held_id text, cancel boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
#variable_conflict use_column
DECLARE
    v_now float8 := clock_now(p_now);
    v_command text;
    -- the worker's info (a non-empty JSON object) with its last_seen added as JSON text:
    -- its floats stay exactly as written (jsonb would round them)
    v_info text := left(rtrim(p_info), -1) || ', "last_seen": ' || to_json(v_now)::text || '}';
BEGIN
    SELECT w.command INTO v_command FROM workers w WHERE w.id = p_worker FOR UPDATE;
    INSERT INTO workers (id, info, last_seen) VALUES (p_worker, v_info, v_now)
    ON CONFLICT (id) DO UPDATE SET info = excluded.info, last_seen = excluded.last_seen,
        command = NULL;
    RETURN QUERY SELECT v_command, NULL::text, NULL::boolean;
    -- In id order, as ack locks them: the two never wait on each other in a circle.
    PERFORM 1 FROM jobs WHERE id = ANY(p_ids) ORDER BY id FOR UPDATE;
    RETURN QUERY
    WITH held AS (
        UPDATE jobs SET lease_expires_at = v_now + p_lease
        FROM unnest(p_ids, p_tokens) AS u(id, token)
        WHERE jobs.id = u.id AND jobs.token = u.token AND jobs.state = 'active'
        RETURNING jobs.id, jobs.cancel_requested
    )
    SELECT NULL::text, held.id, held.cancel_requested FROM held;
END
$$;
