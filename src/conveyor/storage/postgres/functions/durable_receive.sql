-- A running job's wait (storage/durable.py, DurableStore.receive), in one step fenced by its
-- lease (no row: refused). A step recorded final under `p_step` answers at once (a retried
-- call). Else the wait is registered (one of the same step keeps its first `until` and
-- `since`), and the oldest inbox message it matches — or for an event, the oldest kept event
-- sent at most `lookback` seconds before the wait began that this job never took — is taken:
-- recorded as the step (its data the result), the wait removed, done. Past `until` with
-- nothing: recorded as null, done. Otherwise not done: the job suspends until `until`.
-- The record and its `step` event are those storage/durable.py writes (Step.to_json,
-- step_event), built here from the message.
CREATE OR REPLACE FUNCTION durable_receive(
    p_now float8, p_job text, p_token text, p_kind text, p_step text, p_name text,
    p_key text, p_until float8, p_lookback float8)
RETURNS TABLE (done boolean, data text, until float8)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    v_now float8 := clock_now(p_now);
    v_attempt integer;
    v_body text;
    w durable_waits%ROWTYPE;
    v_seq bigint;
    v_id text;
    v_data text;
    v_summary text;
BEGIN
    SELECT attempt INTO v_attempt FROM jobs
    WHERE id = p_job AND token = p_token AND state = 'active' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT body INTO v_body FROM durable_steps s WHERE s.job_id = p_job AND s.name = p_step
        AND s.final;
    IF FOUND THEN
        RETURN QUERY SELECT true, v_body::json ->> 'r', coalesce((v_body::json ->> 't1')::float8,
                                                            v_now);
        RETURN;
    END IF;
    SELECT * INTO w FROM durable_waits dw WHERE dw.job_id = p_job;
    IF NOT FOUND OR w.step <> p_step THEN
        INSERT INTO durable_waits AS dw VALUES (p_job, p_kind, p_step, p_name, p_key, p_until,
                                                p_lookback, v_now, true)
        ON CONFLICT (job_id) DO UPDATE SET kind = excluded.kind, step = excluded.step,
            name = excluded.name, ekey = excluded.ekey, until = excluded.until,
            lookback = excluded.lookback, since = excluded.since, listening = true
        RETURNING * INTO w;
    END IF;
    SELECT i.seq, i.id, i.data INTO v_seq, v_id, v_data FROM durable_inbox i
    WHERE i.job_id = p_job AND i.kind = w.kind AND i.name = w.name AND i.ekey = w.ekey
    ORDER BY i.seq LIMIT 1;
    IF FOUND THEN
        DELETE FROM durable_inbox WHERE seq = v_seq;
    ELSIF w.kind = 'event' AND w.lookback > 0 THEN
        SELECT k.id, k.data INTO v_id, v_data FROM durable_kept k
        WHERE k.name = w.name AND k.ekey = w.ekey AND k.sent_at >= w.since - w.lookback
          AND k.until > v_now
          AND NOT EXISTS (SELECT 1 FROM durable_steps s WHERE s.job_id = p_job
                          AND s.origin = k.id)
        ORDER BY k.sent_at, k.id LIMIT 1;
    END IF;
    IF v_id IS NULL AND v_now < w.until THEN
        RETURN QUERY SELECT false, NULL::text, w.until;
        RETURN;
    END IF;
    v_body := json_build_object('n', p_step, 's', 'ok', 't0', w.since, 't1', v_now)::jsonb
        || CASE WHEN v_data IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('r', v_data) END
        || CASE WHEN coalesce(v_attempt, 0) = 0 THEN '{}'::jsonb
                ELSE jsonb_build_object('a', v_attempt) END
        || CASE WHEN v_id IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('o', v_id) END;
    INSERT INTO durable_steps AS d (job_id, name, seq, final, origin, body)
    VALUES (p_job, p_step,
            coalesce((SELECT max(s.seq) FROM durable_steps s WHERE s.job_id = p_job), 0) + 1,
            true, v_id, v_body)
    ON CONFLICT (job_id, name) DO UPDATE SET final = true, origin = excluded.origin,
        body = excluded.body WHERE NOT d.final;
    DELETE FROM durable_waits dw WHERE dw.job_id = p_job;
    v_summary := coalesce(v_data, 'null');
    IF left(v_summary, 18) = '{"$conveyor":{"e":' THEN  -- sealed (core/envelope.py)
        v_summary := 'encrypted';
    ELSIF length(v_summary) > 120 THEN
        v_summary := left(v_summary, 120) || '…';
    END IF;
    UPDATE jobs SET events = jobs.events || event_line(
        v_now, 'step', NULL, to_json('step ' || p_step || ': ok')::text, NULL, v_attempt,
        json_build_object('name', p_step, 'status', 'ok',
                          'duration', round(greatest(v_now - w.since, 0)::numeric, 6),
                          'summary', v_summary)::text)
    WHERE id = p_job;
    RETURN QUERY SELECT true, v_data, v_now;
END
$$;
