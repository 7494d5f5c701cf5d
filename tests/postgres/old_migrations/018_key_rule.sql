-- conveyor PostgreSQL schema, version 18: a stored key that breaks the key rule ends its own
-- job, and a delivery starts only a job of the queue it came from.
--
-- Nothing here changes a table: every job is kept; one index is rebuilt.
--
-- * The key rule (conveyor/text.py key_fault, docs/flow-control.md "Keys"): 1 to 512 bytes
--   of UTF-8, no control character, line or paragraph separator. Clients check it at
--   enqueue; a job stored before the rule, or by a client that does not check it, could hold
--   a concurrency, order or rate key past what a B-tree entry takes (about 2,700 bytes):
--   every dequeue of its queue then failed on jobs_concurrency or rate_hits_key, for good.
--   flow_pick (dequeue) and start_each (a broker's start) now end such a job dead with the
--   reason, as they end a job past its deadline, before counting any limit; jobs_order leaves
--   such keys out, so the job can be stored and promoted and then meets that end.
-- * start (and start_set, start_each) started any job whose id a delivery carried, whatever
--   its queue: a message of another queue's (another app's) job ran it on a worker that does
--   not serve that queue. A job of another queue, or an unknown id, is now 'foreign': the
--   worker drops the delivery and counts it.

CREATE FUNCTION key_breaks(p_key text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT p_key IS NOT NULL AND p_key <> ''
        AND (octet_length(p_key) > 512 OR p_key ~ '[\x01-\x1f\x7f-\x9f\u2028\u2029]')
$$;

-- The message of a job whose concurrency, order or rate key (in that order) breaks the rule
-- (rules.broken_key_message spells the same words), or NULL.
CREATE FUNCTION broken_key(p_ckey text, p_okey text, p_rkey text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path FROM CURRENT AS $$
    SELECT CASE WHEN key_breaks(p_ckey) THEN 'concurrency key'
                WHEN key_breaks(p_okey) THEN 'order key'
                WHEN key_breaks(p_rkey) THEN 'rate key' END
        || ' breaks the key rule (1 to 512 bytes of UTF-8, no control characters or line '
        || 'breaks): the job cannot start'
$$;

-- End one pending job that must never start, with p_why: dead, as an expiry ends it.
CREATE FUNCTION end_broken(p_now float8, p_id text, p_why text) RETURNS void
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

DROP INDEX jobs_order;
CREATE INDEX jobs_order ON jobs (order_key, seq)
    WHERE order_key IS NOT NULL AND state IN ('pending', 'active', 'retrying')
      AND octet_length(order_key) <= 512;

-- Version 2's flow_pick; a job whose key breaks the rule ends before any limit counts it, and
-- the order lookup names jobs_order's new predicate (so the planner may use it).
CREATE OR REPLACE FUNCTION flow_pick(p_now float8, p_queue text, p_need integer) RETURNS text[]
LANGUAGE plpgsql SET search_path FROM CURRENT SET enable_seqscan = off AS $$
DECLARE
    r record;
    chosen text[] := '{}';
    active jsonb := '{}';       -- concurrency key -> active jobs, counting this call's
    order_first jsonb := '{}';  -- order key -> the oldest unfinished job's id
    order_taken text[] := '{}';
    rate_used jsonb := '{}';    -- rate key -> starts within its window
    why text;
BEGIN
    FOR r IN
        SELECT id, concurrency_key AS ckey, concurrency_limit AS climit, order_key AS okey,
               rate_key AS rkey, rate_limit AS rlimit, rate_period AS rperiod
        FROM jobs WHERE state = 'pending' AND queue = p_queue
        ORDER BY ready_at, seq LIMIT 4096
    LOOP
        why := broken_key(r.ckey, r.okey, r.rkey);
        IF why IS NOT NULL THEN
            PERFORM end_broken(p_now, r.id, why);
            CONTINUE;
        END IF;
        IF r.ckey IS NOT NULL THEN
            IF NOT active ? r.ckey THEN
                active := active || jsonb_build_object(r.ckey, (SELECT count(*) FROM jobs
                    WHERE state = 'active' AND concurrency_key = r.ckey));
            END IF;
            CONTINUE WHEN (active ->> r.ckey)::integer >= r.climit;
        END IF;
        IF r.okey IS NOT NULL THEN
            CONTINUE WHEN r.okey = ANY(order_taken);
            IF NOT order_first ? r.okey THEN
                order_first := order_first || jsonb_build_object(r.okey, (SELECT id FROM jobs
                    WHERE order_key = r.okey AND state IN ('pending', 'active', 'retrying')
                      AND octet_length(order_key) <= 512
                    ORDER BY seq LIMIT 1));
            END IF;
            CONTINUE WHEN (order_first ->> r.okey) IS DISTINCT FROM r.id;
        END IF;
        IF r.rkey IS NOT NULL THEN
            IF NOT rate_used ? r.rkey THEN
                DELETE FROM rate_hits WHERE key = r.rkey AND ts <= p_now - r.rperiod;
                rate_used := rate_used || jsonb_build_object(r.rkey,
                    (SELECT count(*) FROM rate_hits WHERE key = r.rkey));
            END IF;
            CONTINUE WHEN (rate_used ->> r.rkey)::integer >= r.rlimit;
        END IF;
        IF r.ckey IS NOT NULL THEN
            active := active || jsonb_build_object(r.ckey, (active ->> r.ckey)::integer + 1);
        END IF;
        IF r.okey IS NOT NULL THEN
            order_taken := order_taken || r.okey;
        END IF;
        IF r.rkey IS NOT NULL THEN
            rate_used := rate_used || jsonb_build_object(r.rkey, (rate_used ->> r.rkey)::integer + 1);
            INSERT INTO rate_hits (key, ts) VALUES (r.rkey, p_now);
        END IF;
        chosen := chosen || r.id;
        EXIT WHEN cardinality(chosen) >= p_need;
    END LOOP;
    RETURN chosen;
END
$$;

-- Version 6's flow_admits; a job whose key breaks the rule is never admitted to start
-- (start_each ends it before asking), and is due for a relay (p_take false) so that its start
-- ends it; the order lookup names jobs_order's predicate.
CREATE OR REPLACE FUNCTION flow_admits(p_now float8, p_id text, p_take boolean) RETURNS boolean
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    r record;
BEGIN
    SELECT concurrency_key AS ckey, concurrency_limit AS climit, order_key AS okey,
           rate_key AS rkey, rate_limit AS rlimit, rate_period AS rperiod
    INTO r FROM jobs WHERE id = p_id;
    IF broken_key(r.ckey, r.okey, r.rkey) IS NOT NULL THEN
        RETURN NOT p_take;
    END IF;
    IF r.ckey IS NOT NULL AND r.climit > 0 AND (SELECT count(*) FROM jobs
            WHERE state = 'active' AND concurrency_key = r.ckey) >= r.climit THEN
        RETURN false;
    END IF;
    IF r.okey IS NOT NULL AND (SELECT id FROM jobs WHERE order_key = r.okey
            AND state IN ('pending', 'active', 'retrying') AND octet_length(order_key) <= 512
            ORDER BY seq LIMIT 1) IS DISTINCT FROM p_id THEN
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

-- Version 7's start, kept as start_each: a job of another queue (or an unknown id) is
-- 'foreign'; a job whose key breaks the rule ends dead ('skipped') before flow_admits.
CREATE OR REPLACE FUNCTION start_each(p_now float8, p_queue text, p_ids text[], p_redelivered boolean[],
                      p_messages text[], p_worker text, p_lease float8, p_max integer, p_why text,
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
        SELECT jobs.state, jobs.deadline, jobs.gated, jobs.batch_id AS bid, jobs.token,
               jobs.queue AS q, broken_key(jobs.concurrency_key, jobs.order_key,
                                           jobs.rate_key) AS why INTO r
            FROM jobs WHERE jobs.id = j FOR UPDATE;
        IF NOT FOUND OR r.q <> p_queue THEN  -- not a job of this queue: another app's, say
            RETURN QUERY SELECT 'foreign'::text, j, NULL::text, NULL::text, NULL::text,
                NULL::text, NULL::int, NULL::int, NULL::int, NULL::float8, NULL::text, NULL::int;
            CONTINUE;
        END IF;
        IF FOUND AND r.state = 'active' AND p_redelivered[i]
                AND (p_messages[i] IS NULL
                     OR right(coalesce(r.token, ''), length(p_messages[i]) + 1)
                        = '#' || p_messages[i]) THEN
            PERFORM recover(v_now, ARRAY[j], p_max, p_why, p_cancelled);
            SELECT jobs.state, jobs.deadline, jobs.gated, jobs.batch_id AS bid, jobs.token,
                   jobs.queue AS q, broken_key(jobs.concurrency_key, jobs.order_key,
                                               jobs.rate_key) AS why INTO r
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
        IF r.why IS NOT NULL AND NOT v_paused THEN  -- a key that breaks the key rule
            PERFORM end_broken(v_now, j, r.why);
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
            token = replace(gen_random_uuid()::text, '-', '') || coalesce('#' || p_messages[i], ''),
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

-- Version 13's start, kept as start_set, and version 17's start: the plain lease takes only
-- jobs of the delivery's queue; any other goes to start_each, which says 'foreign'.
CREATE OR REPLACE FUNCTION start_set(p_now float8, p_queue text, p_ids text[], p_redelivered boolean[],
                      p_messages text[], p_worker text, p_lease float8, p_max integer, p_why text,
                      p_cancelled text)
RETURNS TABLE (kind text, id text, name text, queue text, payload text, token text,
               attempt integer, errors integer, max_retries integer, timeout float8,
               batch_id text, recoveries integer)
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    v_now float8 := clock_now(p_now);
    n integer := coalesce(cardinality(p_ids), 0);
    f_pos bigint[]; f_ids text[]; f_msgs text[];
    s_pos bigint[]; s_ids text[]; s_redelivered boolean[]; s_msgs text[];
    l_pos bigint[]; l_id text[]; l_name text[]; l_queue text[]; l_payload text[];
    l_token text[]; l_attempt integer[]; l_errors integer[]; l_max_retries integer[];
    l_timeout float8[]; l_batch_id text[]; l_recoveries integer[]; l_batches text[];
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    IF NOT coalesce((SELECT paused FROM queues WHERE name = p_queue), false) THEN
        -- The plain deliveries: each job's first mention, still pending, ungated, in time.
        SELECT array_agg(d.pos), array_agg(d.id), array_agg(d.msg)
        INTO f_pos, f_ids, f_msgs
        FROM (SELECT DISTINCT ON (t.id) t.id, t.msg, t.pos
              FROM unnest(p_ids, p_messages) WITH ORDINALITY AS t(id, msg, pos)
              ORDER BY t.id, t.pos) AS d
        -- The state test matches no partial index: the generic plan would otherwise walk
        -- every pending job of jobs_ready instead of looking the ids up (as in dequeue).
        JOIN (SELECT jobs.id FROM jobs WHERE jobs.id = ANY(p_ids)
                  AND coalesce(jobs.state, '') = 'pending'
                  AND jobs.queue = p_queue
                  AND NOT jobs.gated AND (jobs.deadline IS NULL OR jobs.deadline >= v_now)
              ORDER BY jobs.id FOR UPDATE) AS k ON k.id = d.id;
    END IF;
    IF f_ids IS NOT NULL THEN
        WITH leased AS (
            UPDATE jobs SET state = 'active', attempt = attempt + 1, worker = p_worker,
                token = replace(gen_random_uuid()::text, '-', '') || coalesce('#' || f.msg, ''),
                lease_expires_at = v_now + p_lease, started_at = v_now, publish_at = NULL,
                cancel_requested = false,
                events = events || event_line(v_now, 'started', 'active', NULL, p_worker,
                                              attempt + 1)
            FROM unnest(f_ids, f_msgs, f_pos) AS f(id, msg, pos)
            WHERE jobs.id = f.id  -- locked above, still pending
            RETURNING f.pos, jobs.id, jobs.name, jobs.queue, jobs.payload, jobs.token,
                      jobs.attempt, jobs.errors, jobs.max_retries, jobs.timeout, jobs.batch_id,
                      jobs.recoveries
        )
        SELECT array_agg(pos), array_agg(id), array_agg(name), array_agg(queue),
            array_agg(payload), array_agg(token), array_agg(attempt), array_agg(errors),
            array_agg(max_retries), array_agg(timeout), array_agg(batch_id),
            array_agg(recoveries), array_agg(batch_id) FILTER (WHERE batch_id IS NOT NULL)
        INTO l_pos, l_id, l_name, l_queue, l_payload, l_token, l_attempt, l_errors,
             l_max_retries, l_timeout, l_batch_id, l_recoveries, l_batches
        FROM leased;
        IF l_batches IS NOT NULL THEN
            PERFORM batch_moves(v_now, l_batches,
                                array_fill('pending'::text, ARRAY[cardinality(l_batches)]),
                                array_fill('active'::text, ARRAY[cardinality(l_batches)]));
        END IF;
    END IF;
    IF l_pos IS NOT NULL AND cardinality(l_pos) = n THEN  -- every delivery was plain
        RETURN QUERY
        SELECT 'started'::text, u.id, u.name, u.queue, u.payload, u.token, u.attempt, u.errors,
               u.max_retries, u.timeout, u.batch_id, u.recoveries
        FROM unnest(l_pos, l_id, l_name, l_queue, l_payload, l_token, l_attempt, l_errors,
                    l_max_retries, l_timeout, l_batch_id, l_recoveries)
             AS u(pos, id, name, queue, payload, token, attempt, errors, max_retries,
                  timeout, batch_id, recoveries)
        ORDER BY u.pos;
        RETURN;
    END IF;
    -- The rest, in order, row by row; a job leased above and named again is already running.
    SELECT array_agg(t.pos ORDER BY t.pos), array_agg(t.id ORDER BY t.pos),
           array_agg(t.red ORDER BY t.pos), array_agg(t.msg ORDER BY t.pos)
    INTO s_pos, s_ids, s_redelivered, s_msgs
    FROM unnest(p_ids, p_redelivered, p_messages) WITH ORDINALITY AS t(id, red, msg, pos)
    WHERE NOT t.id = ANY(coalesce(f_ids, '{}'));
    RETURN QUERY
    SELECT r.kind, r.id, r.name, r.queue, r.payload, r.token, r.attempt, r.errors,
           r.max_retries, r.timeout, r.batch_id, r.recoveries
    FROM (
        SELECT u.pos, 'started'::text AS kind, u.id, u.name, u.queue, u.payload, u.token,
               u.attempt, u.errors, u.max_retries, u.timeout, u.batch_id, u.recoveries
        FROM unnest(l_pos, l_id, l_name, l_queue, l_payload, l_token, l_attempt, l_errors,
                    l_max_retries, l_timeout, l_batch_id, l_recoveries)
             AS u(pos, id, name, queue, payload, token, attempt, errors, max_retries,
                  timeout, batch_id, recoveries)
        UNION ALL
        SELECT t.pos, 'running'::text, t.id, NULL, NULL, NULL, NULL, NULL::int, NULL::int,
               NULL::int, NULL::float8, NULL, NULL::int
        FROM unnest(p_ids) WITH ORDINALITY AS t(id, pos)
        WHERE t.id = ANY(coalesce(f_ids, '{}')) AND NOT t.pos = ANY(coalesce(f_pos, '{}'))
        UNION ALL
        SELECT s_pos[e.ord], e.kind, e.id, e.name, e.queue, e.payload, e.token, e.attempt,
               e.errors, e.max_retries, e.timeout, e.batch_id, e.recoveries
        FROM start_each(p_now, p_queue, s_ids, s_redelivered, s_msgs, p_worker, p_lease, p_max,
                        p_why, p_cancelled)
             WITH ORDINALITY AS e(kind, id, name, queue, payload, token, attempt, errors,
                                  max_retries, timeout, batch_id, recoveries, ord)
        WHERE s_ids IS NOT NULL
    ) AS r
    ORDER BY r.pos;
END
$$;

CREATE OR REPLACE FUNCTION start(p_now float8, p_queue text, p_ids text[], p_redelivered boolean[],
                      p_messages text[], p_worker text, p_lease float8, p_max integer, p_why text,
                      p_cancelled text)
RETURNS TABLE (kind text, id text, name text, queue text, payload text, token text,
               attempt integer, errors integer, max_retries integer, timeout float8,
               batch_id text, recoveries integer)
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
#variable_conflict use_column
DECLARE
    v_now float8 := clock_now(p_now);
    n integer := coalesce(cardinality(p_ids), 0);
    plain integer;
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    -- The state test matches no partial index: the generic plan would otherwise walk every
    -- pending job of jobs_ready instead of looking the ids up (as in dequeue).
    SELECT count(*) INTO plain FROM (
        SELECT jobs.id FROM jobs WHERE jobs.id = ANY(p_ids)
            AND coalesce(jobs.state, '') = 'pending' AND jobs.queue = p_queue
            AND NOT jobs.gated AND (jobs.deadline IS NULL OR jobs.deadline >= v_now)
            AND NOT coalesce((SELECT paused FROM queues WHERE name = p_queue), false)
        ORDER BY jobs.id FOR UPDATE) AS k;
    IF plain = n THEN  -- every delivery is a distinct plain job, locked above
        RETURN QUERY
        WITH leased AS (
            UPDATE jobs SET state = 'active', attempt = attempt + 1, worker = p_worker,
                token = replace(gen_random_uuid()::text, '-', '') || coalesce('#' || f.msg, ''),
                lease_expires_at = v_now + p_lease, started_at = v_now, publish_at = NULL,
                cancel_requested = false,
                events = events || event_line(v_now, 'started', 'active', NULL, p_worker,
                                              attempt + 1)
            FROM unnest(p_ids, p_messages) WITH ORDINALITY AS f(id, msg, pos)
            WHERE jobs.id = f.id
            RETURNING f.pos, jobs.id, jobs.name, jobs.queue, jobs.payload, jobs.token,
                      jobs.attempt, jobs.errors, jobs.max_retries, jobs.timeout, jobs.batch_id,
                      jobs.recoveries
        ), starts AS (  -- a batch's first lease sets its started_at; rows locked in id order
            SELECT b.id FROM batches b
            WHERE b.id IN (SELECT l.batch_id FROM leased l) AND b.started_at IS NULL
            ORDER BY b.id FOR UPDATE
        ), started AS (
            UPDATE batches SET started_at = v_now FROM starts
            WHERE batches.id = starts.id AND batches.started_at IS NULL
        )
        SELECT 'started'::text, l.id, l.name, l.queue, l.payload, l.token, l.attempt,
               l.errors, l.max_retries, l.timeout, l.batch_id, l.recoveries
        FROM leased l ORDER BY l.pos;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM start_set(p_now, p_queue, p_ids, p_redelivered, p_messages,
                                         p_worker, p_lease, p_max, p_why, p_cancelled);
END
$$;

