-- The store as a broker's outbox (docs/design.md §7, storage/postgres/outbox.py). When a
-- pending job is next due to be published: NULL = now (every job, and every job that comes
-- back to pending after a start); a time = handed to a relay, due again then if still not
-- started; negative = parked by flow control or a paused queue, due when it may run. No index:
-- publish_due walks jobs_ready in dequeue's order and skips the few jobs in the broker. Nothing
-- on the path without a broker reads or writes the column.
ALTER TABLE jobs ADD COLUMN publish_at float8;

-- Whether job p_id's flow limits (concurrency, order, rate) let it start now. p_take: and if
-- so, record its start in the rate log (a start does; a relay asking of a parked job does
-- not). The caller holds the gate lock (dequeue's) and leases the job in the same transaction,
-- so a second job of the same key, asked next, sees the first one active.
CREATE FUNCTION flow_admits(p_now float8, p_id text, p_take boolean) RETURNS boolean
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    r record;
BEGIN
    SELECT concurrency_key AS ckey, concurrency_limit AS climit, order_key AS okey,
           rate_key AS rkey, rate_limit AS rlimit, rate_period AS rperiod
    INTO r FROM jobs WHERE id = p_id;
    IF r.ckey IS NOT NULL AND r.climit > 0 AND (SELECT count(*) FROM jobs
            WHERE state = 'active' AND concurrency_key = r.ckey) >= r.climit THEN
        RETURN false;
    END IF;
    IF r.okey IS NOT NULL AND (SELECT id FROM jobs WHERE order_key = r.okey
            AND state IN ('pending', 'active', 'retrying') ORDER BY seq LIMIT 1)
            IS DISTINCT FROM p_id THEN
        RETURN false;
    END IF;
    IF r.rkey IS NOT NULL AND r.rlimit > 0 THEN
        DELETE FROM rate_hits WHERE key = r.rkey AND ts <= p_now - r.rperiod;
        IF (SELECT count(*) FROM rate_hits WHERE key = r.rkey) >= r.rlimit THEN
            RETURN false;
        END IF;
        IF p_take THEN
            INSERT INTO rate_hits (key, ts) VALUES (r.rkey, p_now);
        END IF;
    END IF;
    RETURN true;
END
$$;

-- Up to p_count pending jobs of p_queue due to be published, oldest first, stamped due again
-- p_after seconds from now; rows another relay holds are skipped.
CREATE FUNCTION publish_due(p_now float8, p_queue text, p_count integer, p_after float8)
RETURNS text[]
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now float8 := clock_now(p_now);
    ids text[];
BEGIN
    IF coalesce((SELECT paused FROM queues WHERE name = p_queue), false) THEN
        RETURN '{}';
    END IF;
    SELECT array_agg(s.id ORDER BY s.ready_at, s.seq) INTO ids FROM (
        SELECT id, ready_at, seq FROM jobs WHERE state = 'pending' AND queue = p_queue
            AND (publish_at IS NULL OR publish_at BETWEEN 0 AND v_now
                 OR (publish_at < 0 AND flow_admits(v_now, id, false)))
        ORDER BY ready_at, seq LIMIT p_count FOR UPDATE SKIP LOCKED) AS s;
    IF ids IS NULL THEN
        RETURN '{}';
    END IF;
    UPDATE jobs SET publish_at = v_now + p_after WHERE id = ANY(ids);
    RETURN ids;
END
$$;

-- Lease delivered jobs of one queue (p_ids, with the broker's redelivered flags), one reply
-- per delivery in order: kind 'started' (with the leased job's columns, as dequeue returns
-- them), 'running' (active under another lease; or a second message in this call), 'skipped'
-- (finished, unknown, expired here) or 'parked' (flow control or a pause holds it back: it
-- waits in the store, publish_at < 0). An active job whose message comes redelivered is taken
-- over as a lease expiry would take it (recover: 'recovered', dead past p_max), then leased.
CREATE FUNCTION start(p_now float8, p_queue text, p_ids text[], p_redelivered boolean[],
                      p_worker text, p_lease float8, p_max integer, p_why text,
                      p_cancelled text)
RETURNS TABLE (kind text, id text, name text, queue text, payload text, token text,
               attempt integer, errors integer, max_retries integer, timeout float8,
               batch_id text, recoveries integer)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    v_now float8 := clock_now(p_now);
    v_paused boolean := coalesce((SELECT paused FROM queues WHERE name = p_queue), false);
    seen text[] := '{}';
    j text;
    i integer;
    r record;
    l record;
    gate_locked boolean := false;
    b_ids text[] := '{}';
    b_from text[] := '{}';
    b_to text[] := '{}';
BEGIN
    FOR i IN 1 .. coalesce(cardinality(p_ids), 0) LOOP
        j := p_ids[i];
        IF j = ANY(seen) THEN
            RETURN QUERY SELECT 'running'::text, j, NULL::text, NULL::text, NULL::text,
                NULL::text, NULL::int, NULL::int, NULL::int, NULL::float8, NULL::text, NULL::int;
            CONTINUE;
        END IF;
        seen := seen || j;
        SELECT jobs.state, jobs.deadline, jobs.gated, jobs.batch_id AS bid INTO r
            FROM jobs WHERE jobs.id = j FOR UPDATE;
        IF FOUND AND r.state = 'active' AND p_redelivered[i] THEN
            PERFORM recover(v_now, ARRAY[j], p_max, p_why, p_cancelled);
            SELECT jobs.state, jobs.deadline, jobs.gated, jobs.batch_id AS bid INTO r
                FROM jobs WHERE jobs.id = j;
        ELSIF FOUND AND r.state = 'active' THEN
            RETURN QUERY SELECT 'running'::text, j, NULL::text, NULL::text, NULL::text,
                NULL::text, NULL::int, NULL::int, NULL::int, NULL::float8, NULL::text, NULL::int;
            CONTINUE;
        END IF;
        IF NOT FOUND OR r.state <> 'pending' THEN
            RETURN QUERY SELECT 'skipped'::text, j, NULL::text, NULL::text, NULL::text,
                NULL::text, NULL::int, NULL::int, NULL::int, NULL::float8, NULL::text, NULL::int;
            CONTINUE;
        END IF;
        IF r.deadline IS NOT NULL AND r.deadline < v_now THEN
            UPDATE jobs SET state = 'dead', message = 'deadline passed before the job could start',
                finished_at = v_now, token = NULL, lease_expires_at = NULL, publish_at = NULL,
                cancel_requested = false,
                events = events || event_line(v_now, 'expired', 'dead',
                    '"deadline passed before the job could start"', NULL, attempt)
            WHERE jobs.id = j;
            IF r.bid IS NOT NULL THEN
                b_ids := b_ids || r.bid; b_from := b_from || 'pending'::text;
                b_to := b_to || 'dead'::text;
            END IF;
            RETURN QUERY SELECT 'skipped'::text, j, NULL::text, NULL::text, NULL::text,
                NULL::text, NULL::int, NULL::int, NULL::int, NULL::float8, NULL::text, NULL::int;
            CONTINUE;
        END IF;
        IF r.gated AND NOT v_paused AND NOT gate_locked THEN
            PERFORM pg_advisory_xact_lock(hashtext('conveyor-gate:' || current_schema()));
            gate_locked := true;
        END IF;
        IF v_paused OR (r.gated AND NOT flow_admits(v_now, j, true)) THEN
            UPDATE jobs SET publish_at = -1 WHERE jobs.id = j;
            RETURN QUERY SELECT 'parked'::text, j, NULL::text, NULL::text, NULL::text,
                NULL::text, NULL::int, NULL::int, NULL::int, NULL::float8, NULL::text, NULL::int;
            CONTINUE;
        END IF;
        UPDATE jobs SET state = 'active', attempt = attempt + 1, worker = p_worker,
            token = replace(gen_random_uuid()::text, '-', ''),
            lease_expires_at = v_now + p_lease, started_at = v_now, publish_at = NULL,
            cancel_requested = false,
            events = events || event_line(v_now, 'started', 'active', NULL, p_worker,
                                          attempt + 1)
        WHERE jobs.id = j
        RETURNING jobs.id, jobs.name, jobs.queue, jobs.payload, jobs.token, jobs.attempt,
                  jobs.errors, jobs.max_retries, jobs.timeout, jobs.batch_id, jobs.recoveries
        INTO l;
        IF l.batch_id IS NOT NULL THEN
            b_ids := b_ids || l.batch_id; b_from := b_from || 'pending'::text;
            b_to := b_to || 'active'::text;
        END IF;
        RETURN QUERY SELECT 'started'::text, l.id, l.name, l.queue, l.payload, l.token,
            l.attempt, l.errors, l.max_retries, l.timeout, l.batch_id, l.recoveries;
    END LOOP;
    IF cardinality(b_ids) > 0 THEN
        PERFORM batch_moves(v_now, b_ids, b_from, b_to);
    END IF;
END
$$;

-- Jobs whose message the broker gave up on (its delivery limit): each still pending or active
-- ends dead with p_reason, its lease fenced. Returns how many.
CREATE FUNCTION bury(p_now float8, p_ids text[], p_reason text) RETURNS integer
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
