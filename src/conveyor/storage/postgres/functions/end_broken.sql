-- End one pending job that must never start, with p_why: dead, as an expiry ends it.
CREATE OR REPLACE FUNCTION end_broken(p_now float8, p_id text, p_why text) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    b text;
BEGIN
    UPDATE jobs SET state = 'dead', message = p_why, finished_at = p_now, token = NULL,
        lease_expires_at = NULL, publish_at = NULL, cancel_requested = false,
        events = events || event_line(p_now, 'dead', 'dead', to_json(p_why)::text, NULL, attempt)
    WHERE id = p_id AND state = 'pending'
    RETURNING batch_id INTO b;
    IF FOUND AND b IS NOT NULL THEN
        PERFORM batch_moves(p_now, ARRAY[b], ARRAY['pending'], ARRAY['dead']);
    END IF;
END
$$;
