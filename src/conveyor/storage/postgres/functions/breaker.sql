-- Breakers (issue 56, docs/flow-control.md "Breakers"): a key opened by errors holds its
-- pending jobs back until a probe may start; the probe's outcome closes or reopens it.
-- One row of `breakers` per key not closed, or closed with errors in its window (a key with
-- no row is closed). What reads and writes it:
--   * breaker_job, a BEFORE INSERT trigger on every insert path: a job stored with a breaker
--     key gets it in jobs.breaker_key and is gated, so that only the gated paths lease it.
--   * breaker_gate: whether the lease may start a job of a key now (gate_check.sql under
--     the gate lock, flow_admits.sql); breaker_probe: the leased job that starts while its
--     key is open becomes the probe (dequeue_each.sql, start_each.sql, after the lease, so a
--     breaker row is locked after the job rows, as the ack locks them).
--   * breaker_acks: the acks of jobs with a key (ack.sql, in the ack's transaction).

CREATE OR REPLACE FUNCTION breaker_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.breaker_key := NEW.flow::json ->> 'breaker_key';
    NEW.gated := NEW.gated OR NEW.breaker_key IS NOT NULL;
    RETURN NEW;
END
$$;
DROP TRIGGER IF EXISTS jobs_breaker ON jobs;
CREATE TRIGGER jobs_breaker BEFORE INSERT ON jobs FOR EACH ROW
    WHEN (NEW.flow ~ '"breaker_key"') EXECUTE FUNCTION breaker_job();

-- 'c': the key is closed (the job starts as usual); 'p': it is open and its probe is due, or
-- half-open with no probe running (the job may start as the probe); 'h': held back.
CREATE OR REPLACE FUNCTION breaker_gate(p_now float8, p_key text) RETURNS text
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT CASE WHEN b.state IS NULL OR b.state = 'closed' THEN 'c'
                WHEN b.state = 'open' AND p_now >= b.probe_at THEN 'p'
                WHEN b.state = 'half_open' AND NOT EXISTS (SELECT 1 FROM jobs
                    WHERE id = b.probe_id AND state = 'active') THEN 'p'
                ELSE 'h' END
    FROM (SELECT 1) AS one LEFT JOIN breakers b ON b.key = p_key
$$;

-- The jobs just leased (p_ids, locked by the caller) that start while their key is open or
-- half-open are its probe: the key becomes half-open with probe_id the job's, and the job
-- gets a `breaker` event. The gate admitted at most one job per such key, so the test here
-- only tells a probe from a job of a closed key (or one that a concurrent ack has just
-- opened: its probe is not due).
CREATE OR REPLACE FUNCTION breaker_probe(p_now float8, p_ids text[]) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    WITH p AS (
        UPDATE breakers b SET state = 'half_open', probe_id = j.id
        FROM jobs j
        WHERE j.id = ANY(p_ids) AND j.breaker_key = b.key
          AND ((b.state = 'open' AND b.probe_at <= p_now)
               OR (b.state = 'half_open' AND NOT EXISTS (SELECT 1 FROM jobs x
                   WHERE x.id = b.probe_id AND x.id <> j.id AND x.state = 'active')))
        RETURNING j.id, b.key
    )
    UPDATE jobs SET events = events || event_line(p_now, 'breaker', NULL,
        to_json('probe of breaker ' || p.key)::text, worker, attempt)
    FROM p WHERE jobs.id = p.id;
END
$$;

-- Seconds as the breaker's words show them (Python's `:g` for the values one sets: 60, 0.5).
CREATE OR REPLACE FUNCTION breaker_secs(p_s float8) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_s = trunc(p_s) AND abs(p_s) < 1e15 THEN trunc(p_s)::bigint::text
                ELSE p_s::text END
$$;

-- The applied acks of jobs with a breaker key, in ack order (the caller holds the jobs'
-- rows): p_effects[i] 'error' (a counted error: the run raised), 'ok' (succeeded or failed:
-- the downstream answered), 'snooze' (RetryAfter) or NULL (nothing counts); p_ords[i] the
-- ack's place in the call's arrays: p_secs (a snooze's seconds) and p_data (the error event's
-- data: its type and message name the last error).
CREATE OR REPLACE FUNCTION breaker_acks(p_now float8, p_ids text[], p_effects text[],
                                        p_ords integer[], p_secs float8[], p_data text[])
RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    i integer;
    j record;
    b record;
    f json;
    log float8[];
    said text;
    err json;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(p_ids), 0) LOOP
        CONTINUE WHEN p_effects[i] IS NULL;
        SELECT id, breaker_key AS key, flow INTO j FROM jobs WHERE id = p_ids[i];
        CONTINUE WHEN j.key IS NULL;
        SELECT * INTO b FROM breakers WHERE key = j.key FOR UPDATE;
        IF NOT FOUND THEN
            CONTINUE WHEN p_effects[i] = 'ok';  -- closed, with nothing to forget
            INSERT INTO breakers (key) VALUES (j.key) ON CONFLICT (key) DO NOTHING;
            SELECT * INTO b FROM breakers WHERE key = j.key FOR UPDATE;
        END IF;
        f := j.flow::json;
        said := NULL;
        IF p_effects[i] = 'error' THEN
            log := ARRAY(SELECT t FROM unnest(b.failures) AS t
                         WHERE t > p_now - (f ->> 'breaker_within')::float8) || p_now;
            IF b.state = 'closed' AND cardinality(log) >= (f ->> 'breaker_open_after')::integer
            THEN
                -- U+0000 travels escaped (text.py), and ->> cannot give it back: shown as U+FFFD
                err := replace(p_data[p_ords[i]], '\u0000', '\ufffd')::json;
                b.reason := left(cardinality(log) || ' errors within '
                    || breaker_secs((f ->> 'breaker_within')::float8) || 's; last: '
                    || coalesce(err ->> 'type', 'error') || ': ' || coalesce(err ->> 'message', ''),
                    200);
                said := 'breaker ' || j.key || ' opened: ' || b.reason;
            ELSIF b.state = 'half_open' AND b.probe_id = j.id THEN
                b.reason := 'probe failed';
                said := 'breaker ' || j.key || ' opened again: probe failed';
            END IF;
            IF said IS NOT NULL THEN
                UPDATE breakers SET state = 'open', failures = log, opened_at = p_now,
                    probe_at = p_now + (f ->> 'breaker_cool_down')::float8, probe_id = NULL,
                    reason = b.reason, trips = trips + 1,
                    within = (f ->> 'breaker_within')::float8
                WHERE key = j.key;
            ELSE
                UPDATE breakers SET failures = log, within = (f ->> 'breaker_within')::float8
                WHERE key = j.key;
            END IF;
        ELSIF p_effects[i] = 'ok' THEN
            IF b.state = 'half_open' AND b.probe_id = j.id THEN
                DELETE FROM breakers WHERE key = j.key;  -- closed with an empty log: forgotten
                said := 'breaker ' || j.key || ' closed: probe succeeded';
            END IF;
        ELSE  -- snooze: open for its seconds, no failure counted
            said := 'breaker ' || j.key || ' paused for ' || breaker_secs(p_secs[p_ords[i]])
                    || 's (RetryAfter)';
            UPDATE breakers SET state = 'open',
                opened_at = CASE WHEN b.state = 'closed' THEN p_now ELSE opened_at END,
                probe_at = greatest(coalesce(probe_at, 0), p_now + p_secs[p_ords[i]]),
                probe_id = NULL, trips = trips + CASE WHEN b.state = 'closed' THEN 1 ELSE 0 END,
                reason = 'paused ' || breaker_secs(p_secs[p_ords[i]]) || 's by RetryAfter',
                within = (f ->> 'breaker_within')::float8
            WHERE key = j.key;
        END IF;
        IF said IS NOT NULL THEN
            UPDATE jobs SET events = events || event_line(p_now, 'breaker', NULL,
                to_json(said)::text, worker, attempt)
            WHERE id = j.id;
        END IF;
    END LOOP;
END
$$;
