-- Record steps of a running job (storage/durable.py, DurableStore.save_steps), fenced by its
-- lease: the job row is locked and must be active under `p_token` (false: refused, nothing
-- written). A name recorded final already keeps its record; any other record replaces the
-- one of its name. `p_events[i]` is the event line of step i (NULL for a cursor), appended
-- for the steps written.
CREATE OR REPLACE FUNCTION durable_save(
    p_job text, p_token text, p_names text[], p_final boolean[], p_origins text[],
    p_bodies text[], p_events text[])
RETURNS boolean LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_lines text;
BEGIN
    PERFORM 1 FROM jobs WHERE id = p_job AND token = p_token AND state = 'active' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    WITH s AS (
        INSERT INTO durable_steps AS d (job_id, name, seq, final, origin, body)
        SELECT p_job, u.name,
               coalesce((SELECT max(seq) FROM durable_steps WHERE job_id = p_job), 0) + u.ord,
               u.final, u.origin, u.body
        FROM unnest(p_names, p_final, p_origins, p_bodies)
            WITH ORDINALITY AS u(name, final, origin, body, ord)
        ON CONFLICT (job_id, name) DO UPDATE SET final = excluded.final,
            origin = excluded.origin, body = excluded.body
            WHERE NOT d.final
        RETURNING d.name
    )
    SELECT string_agg(e.line, '' ORDER BY e.ord) INTO v_lines
    FROM unnest(p_names, p_events) WITH ORDINALITY AS e(name, line, ord)
    WHERE e.name IN (SELECT name FROM s) AND e.line IS NOT NULL;
    IF v_lines IS NOT NULL THEN
        UPDATE jobs SET events = events || v_lines WHERE id = p_job;
    END IF;
    RETURN true;
END
$$;
