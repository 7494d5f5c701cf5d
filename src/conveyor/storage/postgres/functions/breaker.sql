-- Breakers (issue 56, docs/flow-control.md "Breakers"): storage/breakers.py's rules, spelled
-- for PostgreSQL. A key's breaker is one row of `breakers`; a key without one is closed, and
-- a closed key whose failure log is empty has none. What reads and writes it:
--   * breaker_job, a BEFORE INSERT trigger on every insert path: a job stored with a breaker
--     key gets it in jobs.breaker_key and is gated, so that only the gated paths lease it.
--   * breaker_gate: whether a job of a key may start now (gate_check.sql under the gate lock,
--     flow_admits.sql); the lease writes breaker_probe_line into the job it starts as the
--     probe, then breaker_probe makes it the key's probe (dequeue_each.sql, start_each.sql:
--     after the lease, so that a breaker row is locked after the job rows, as an ack does).
--   * breaker_acks: the acks of jobs with a key (ack.sql, in the ack's transaction).
-- Text as Python writes it: breaker_shown is core/text.py's `shown` (a key obeys the key
-- rule: no control character to escape), breaker_secs is the `:g` of the seconds one sets.

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

CREATE OR REPLACE FUNCTION breaker_shown(p_key text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT '''' || left(p_key, 40) || CASE WHEN length(p_key) > 40 THEN '...''' ELSE '''' END
$$;

CREATE OR REPLACE FUNCTION breaker_secs(p_s float8) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_s = 0 THEN '0'
                WHEN abs(p_s) >= 1e-4 AND abs(p_s) < 1e6 THEN (
                    SELECT CASE WHEN t LIKE '%.%' THEN rtrim(rtrim(t, '0'), '.') ELSE t END
                    FROM (SELECT round(p_s::numeric,
                                       5 - floor(log(abs(p_s)::numeric))::integer)::text) AS r(t))
                ELSE p_s::text END
$$;

-- 'c': the key is closed (the job starts as usual); 'p': open with its probe due, or
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

-- The `breaker` event line of a job its lease starts as the probe of p_key ('' for any other
-- job of the key: the gate admitted at most one job per key not closed). Read in the lease's
-- own statement, before breaker_probe marks the key, so it comes before `started`. (PL/pgSQL:
-- event_line's file is applied after this one.)
CREATE OR REPLACE FUNCTION breaker_probe_line(p_now float8, p_key text) RETURNS text
LANGUAGE plpgsql STABLE SET search_path FROM CURRENT AS $$
BEGIN
    IF breaker_gate(p_now, p_key) <> 'p' THEN
        RETURN '';
    END IF;
    RETURN event_line(p_now, 'breaker', 'pending',
                      to_json('probe of breaker ' || breaker_shown(p_key))::text);
END
$$;

-- The jobs just leased (p_ids, locked by the caller) that started while their key is open
-- or half-open: each is its key's probe (half-open, probe_id the job's). The test tells a
-- probe from a job of a closed key, or of one a concurrent ack has just opened (its probe
-- not due), as breaker_probe_line told it. Breaker rows are locked in key order, as
-- breaker_acks locks them: a lease and an ack never wait for each other in a circle.
CREATE OR REPLACE FUNCTION breaker_probe(p_now float8, p_ids text[]) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT 1 FROM breakers WHERE key IN (SELECT breaker_key FROM jobs WHERE id = ANY(p_ids))
    ORDER BY key FOR UPDATE;
    UPDATE breakers b SET state = 'half_open', probe_id = j.id
    FROM jobs j
    WHERE j.id = ANY(p_ids) AND j.breaker_key = b.key
      AND ((b.state = 'open' AND b.probe_at <= p_now)
           OR (b.state = 'half_open' AND NOT EXISTS (SELECT 1 FROM jobs x
               WHERE x.id = b.probe_id AND x.id <> j.id AND x.state = 'active')))
$$;

-- An ack's error on one line (breakers._error_line): its message, led by the error's type
-- unless it starts with it, whitespace runs made one space, at most 200 characters. p_message
-- and p_data are the ack's message and event data as JSON; U+0000 travels escaped
-- (storage/postgres/text.py) and cannot be read back as text: it shows as U+FFFD.
CREATE OR REPLACE FUNCTION breaker_error_line(p_message text, p_data text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT left(regexp_replace(regexp_replace(
        CASE WHEN e.kind IS NOT NULL AND NOT starts_with(coalesce(e.m, ''), e.kind)
             THEN e.kind || ': ' || coalesce(e.m, '') ELSE coalesce(e.m, 'error') END,
        '^\s+|\s+$', '', 'g'), '\s+', ' ', 'g'), 200)
    FROM (SELECT replace(p_message, '\u0000', '\ufffd')::json #>> '{}' AS m,
                 replace(p_data, '\u0000', '\ufffd')::json ->> 'type' AS kind) AS e
$$;

-- The applied acks of jobs with a breaker key, in ack order (the caller holds the jobs'
-- rows; breakers.after_ack). They take the gate lock the leases hold while they read the
-- breakers (gate_check, flow_admits), and their time (p_now: the storage clock's, NULL for
-- the server's) is read after it: a lease either saw the breaker before this ack moved it
-- and started its jobs earlier than the move's time, or sees the move. (An ack that names a
-- pending job with a stale token holds that row while it waits, and a lease that picked the
-- job waits for it under the lock: PostgreSQL ends that circle with a deadlock error, an
-- outage the call is retried on, connection.py.) p_touches[i] 'error' (a counted error: the run raised),
-- 'answer' (succeeded or failed: the downstream answered), 'snooze' (RetryAfter) or NULL
-- (nothing to count); p_ords[i] the ack's place in the call's arrays: p_secs (a snooze's
-- seconds), p_messages and p_data (the ack's message and event data, as JSON).
CREATE OR REPLACE FUNCTION breaker_acks(p_now float8, p_ids text[], p_touches text[],
                                        p_ords integer[], p_secs float8[], p_messages text[],
                                        p_data text[])
RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    keys text[];
    i integer;
    j record;
    b record;
    f json;
    v_within float8;
    secs float8;
    log float8[];
    said text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('conveyor-gate:' || current_schema()));
    p_now := clock_now(p_now);
    -- Every row this call writes, made (an error or a pause of a key without one) and
    -- locked in key order first, so that two acks (or an ack and a lease, breaker_probe)
    -- never wait for each other in a circle.
    SELECT array_agg(DISTINCT jobs.breaker_key ORDER BY jobs.breaker_key) INTO keys
    FROM unnest(p_ids, p_touches) AS a(id, touch) JOIN jobs ON jobs.id = a.id
    WHERE a.touch IS NOT NULL AND jobs.breaker_key IS NOT NULL;
    IF keys IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO breakers (key)
    SELECT DISTINCT jobs.breaker_key
    FROM unnest(p_ids, p_touches) AS a(id, touch) JOIN jobs ON jobs.id = a.id
    WHERE a.touch IN ('error', 'snooze') AND jobs.breaker_key IS NOT NULL
    ORDER BY 1 ON CONFLICT (key) DO NOTHING;
    PERFORM 1 FROM breakers WHERE key = ANY(keys) ORDER BY key FOR UPDATE;
    FOR i IN 1 .. coalesce(cardinality(p_ids), 0) LOOP
        CONTINUE WHEN p_touches[i] IS NULL;
        SELECT id, breaker_key AS key, flow INTO j FROM jobs WHERE id = p_ids[i];
        CONTINUE WHEN j.key IS NULL;
        SELECT * INTO b FROM breakers WHERE key = j.key;  -- locked above
        IF NOT FOUND THEN  -- closed with nothing logged, or forgotten by an earlier ack here
            CONTINUE WHEN p_touches[i] = 'answer';
            INSERT INTO breakers (key) VALUES (j.key) ON CONFLICT (key) DO NOTHING;
            SELECT * INTO b FROM breakers WHERE key = j.key FOR UPDATE;
        END IF;

        f := j.flow::json;
        v_within := coalesce(nullif((f ->> 'breaker_within')::float8, 0), b.within);
        log := ARRAY(SELECT t FROM unnest(b.failures) AS t WHERE t > p_now - v_within);
        said := NULL;
        IF p_touches[i] = 'error' THEN
            log := log || p_now;
            IF b.state = 'half_open' AND b.probe_id = j.id THEN
                b.reason := 'probe failed: '
                    || breaker_error_line(p_messages[p_ords[i]], p_data[p_ords[i]]);
                said := 'breaker ' || breaker_shown(j.key) || ' opened again: probe failed';
            ELSIF b.state = 'closed'
                    AND cardinality(log) >= (f ->> 'breaker_open_after')::integer THEN
                b.reason := cardinality(log) || ' errors within ' || breaker_secs(v_within)
                    || 's; last: '
                    || breaker_error_line(p_messages[p_ords[i]], p_data[p_ords[i]]);
                said := 'breaker ' || breaker_shown(j.key) || ' opened: ' || left(b.reason, 200);
            END IF;
            IF said IS NOT NULL THEN
                UPDATE breakers SET state = 'open', failures = log, within = v_within,
                    opened_at = p_now, probe_at = p_now + (f ->> 'breaker_cool_down')::float8,
                    probe_id = NULL, reason = left(b.reason, 200), trips = trips + 1
                WHERE key = j.key;
            ELSE
                UPDATE breakers SET failures = log, within = v_within
                WHERE key = j.key;
            END IF;
        ELSIF p_touches[i] = 'answer' THEN
            IF b.state = 'half_open' AND b.probe_id = j.id THEN
                said := 'breaker ' || breaker_shown(j.key) || ' closed: probe succeeded';
                log := '{}';
            END IF;
            IF said IS NOT NULL OR b.state = 'closed' THEN  -- closed: forgotten once clean
                DELETE FROM breakers WHERE key = j.key AND cardinality(log) = 0;
                UPDATE breakers SET state = 'closed', failures = log,
                    within = v_within, opened_at = NULL, probe_at = NULL,
                    probe_id = NULL, reason = NULL
                WHERE key = j.key;
            END IF;
        ELSE  -- a RetryAfter: open for its seconds, no failure counted
            secs := greatest(coalesce(p_secs[p_ords[i]], 0), 0);
            said := 'breaker ' || breaker_shown(j.key) || ' paused for ' || breaker_secs(secs)
                    || 's (RetryAfter)';
            UPDATE breakers SET state = 'open', within = v_within,
                opened_at = CASE WHEN b.state = 'closed' THEN p_now ELSE opened_at END,
                trips = trips + CASE WHEN b.state = 'closed' THEN 1 ELSE 0 END,
                probe_at = greatest(coalesce(probe_at, 0), p_now + secs), probe_id = NULL,
                reason = 'paused ' || breaker_secs(secs) || 's by RetryAfter'
            WHERE key = j.key;
        END IF;
        IF said IS NOT NULL THEN
            UPDATE jobs SET events = events || event_line(p_now, 'breaker', state,
                to_json(said)::text, NULL, attempt)
            WHERE id = j.id;
        END IF;
    END LOOP;
END
$$;
