-- Durable jobs: messages into jobs' inboxes (storage/durable.py, DurableStore.send and
-- send_event). A message id a job holds or took already is not stored again; each suspended
-- job a delivery answers is woken in the same step (durable_wake).
--
-- durable_send: one message to one job by id. Returns -1 for no such job, 0 for a finished
-- one (nothing kept), 1 when delivered.
CREATE OR REPLACE FUNCTION durable_send(
    p_now float8, p_job text, p_id text, p_kind text, p_name text, p_key text, p_data text)
RETURNS integer LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now float8 := clock_now(p_now);
    v_state text;
BEGIN
    SELECT state INTO v_state FROM jobs WHERE id = p_job FOR UPDATE;
    IF NOT FOUND THEN
        RETURN -1;
    ELSIF v_state IN ('succeeded', 'failed', 'dead', 'cancelled') THEN
        RETURN 0;
    END IF;
    PERFORM durable_put(v_now, ARRAY[p_job], p_id, p_kind, p_name, p_key, p_data);
    RETURN 1;
END
$$;

-- durable_event: an event to every job whose wait listens for its name and key (each stops
-- listening: a wait takes one event), kept `p_keep` seconds for waits that begin later.
-- Returns how many waits it reached.
CREATE OR REPLACE FUNCTION durable_event(
    p_now float8, p_id text, p_name text, p_key text, p_data text, p_keep float8)
RETURNS integer LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now float8 := clock_now(p_now);
    v_ids text[];
BEGIN
    DELETE FROM durable_kept WHERE until <= v_now;
    IF p_keep > 0 THEN
        INSERT INTO durable_kept (id, name, ekey, data, sent_at, until)
        VALUES (p_id, p_name, p_key, p_data, v_now, v_now + p_keep);
    END IF;
    SELECT array_agg(j.id ORDER BY j.id) INTO v_ids FROM (
        SELECT j.id FROM durable_waits w JOIN jobs j ON j.id = w.job_id
        WHERE w.name = p_name AND w.ekey = p_key AND w.kind = 'event' AND w.listening
          AND j.state NOT IN ('succeeded', 'failed', 'dead', 'cancelled')
        ORDER BY j.id FOR UPDATE OF j, w) AS j;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    UPDATE durable_waits SET listening = false WHERE job_id = ANY(v_ids);
    PERFORM durable_put(v_now, v_ids, p_id, 'event', p_name, p_key, p_data);
    RETURN cardinality(v_ids);
END
$$;

-- durable_put: the message into each job's inbox, then the wake-ups.
CREATE OR REPLACE FUNCTION durable_put(
    p_now float8, p_jobs text[], p_id text, p_kind text, p_name text, p_key text, p_data text)
RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO durable_inbox (job_id, id, kind, name, ekey, data, sent_at)
    SELECT j, p_id, p_kind, p_name, p_key, p_data, p_now FROM unnest(p_jobs) AS j
    WHERE NOT EXISTS (SELECT 1 FROM durable_steps s WHERE s.job_id = j AND s.origin = p_id)
    ON CONFLICT (job_id, id) DO NOTHING;
    PERFORM durable_wake(p_now, p_jobs);
END
$$;
