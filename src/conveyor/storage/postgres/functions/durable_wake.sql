-- Durable jobs: the suspended (scheduled) jobs of `p_ids` whose wait has its answer in the
-- inbox become pending, with a `woken` event and their batches' counters: at a delivery
-- (durable_send, durable_event) and right after an ack suspended them (ack.sql), for an
-- answer that came while the job was leaving its worker. Returns how many it woke. The
-- message is storage/durable.py's WOKEN_MESSAGE.
CREATE OR REPLACE FUNCTION durable_wake(
    p_now float8, p_ids text[], p_message text DEFAULT 'woken: what it waited for arrived')
RETURNS integer LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    woken integer;
    b_ids text[];
BEGIN
    WITH due AS (
        SELECT j.id FROM jobs j JOIN durable_waits w ON w.job_id = j.id
        WHERE j.id = ANY(p_ids) AND j.state = 'scheduled'
          AND EXISTS (SELECT 1 FROM durable_inbox i WHERE i.job_id = j.id AND i.kind = w.kind
                      AND i.name = w.name AND i.ekey = w.ekey)
        ORDER BY j.id FOR UPDATE OF j
    ), u AS (
        UPDATE jobs SET state = 'pending', ready_at = p_now, message = p_message,
            events = jobs.events || event_line(p_now, 'woken', 'pending', to_json(p_message)::text,
                                               NULL, jobs.attempt)
        FROM due WHERE jobs.id = due.id
        RETURNING jobs.batch_id
    )
    SELECT count(*), array_agg(u.batch_id) FILTER (WHERE u.batch_id IS NOT NULL)
    INTO woken, b_ids FROM u;
    IF b_ids IS NOT NULL THEN
        PERFORM batch_moves(p_now, b_ids, array_fill('scheduled'::text, ARRAY[cardinality(b_ids)]),
                            array_fill('pending'::text, ARRAY[cardinality(b_ids)]));
    END IF;
    RETURN woken;
END
$$;
