-- conveyor PostgreSQL schema, version 2: the hot-path transitions as server-side functions.
--
-- Each transition a worker or a client makes often is one call of one function: one round
-- trip, with no client code between its statements (the way Lua scripts serve the Redis
-- backend). The functions take the storage clock as `p_now` (epoch seconds): NULL means the
-- server's clock_timestamp(), read inside; a test's FakeClock passes its own time.
-- Nothing here changes a table: a database at version 1 upgrades in place, every job kept.
-- Every function runs with this schema as its search_path, so it can be called from any
-- connection (an application's own transaction enqueues with `<schema>.enqueue(…)`).
-- The big ones plan their statements once per connection (`force_generic_plan`): left to
-- choose, PL/pgSQL re-plans them on every call, since a plan for the actual arrays looks
-- cheaper, and planning cost more than running. Their statements are written so a generic
-- plan is a good one: states are literals (the partial indexes apply), ids are looked up by
-- key, never filtered out of a partial index.

-- The storage clock: the given time, or the server's.
CREATE FUNCTION clock_now(p_now float8) RETURNS float8
LANGUAGE sql VOLATILE AS $$
    SELECT coalesce(p_now, extract(epoch FROM clock_timestamp())::float8)
$$;

-- One NDJSON event line, as Event.to_json writes it (keys left out when empty). `p_m` and
-- `p_d` are JSON already (the message as a JSON string, the data as a JSON object), so text
-- holding U+0000 (which `text` refuses) can travel as its \u0000 escape.
CREATE FUNCTION event_line(p_t float8, p_k text, p_s text DEFAULT NULL, p_m text DEFAULT NULL,
                           p_w text DEFAULT NULL, p_a integer DEFAULT 0, p_d text DEFAULT NULL)
RETURNS text LANGUAGE sql STABLE AS $$
    SELECT '{"t":' || to_json(p_t)::text || ',"k":' || to_json(p_k)::text
        || coalesce(',"s":' || to_json(p_s)::text, '')
        || coalesce(',"m":' || p_m, '')
        || coalesce(',"w":' || to_json(p_w)::text, '')
        || CASE WHEN coalesce(p_a, 0) <> 0 THEN ',"a":' || p_a ELSE '' END
        || coalesce(',"d":' || p_d, '') || E'}\n'
$$;

-- All-time and daily outcome totals: one row per counted outcome (processed, failed, dead,
-- retried), added up per (queue, name) and per (queue, day).
CREATE FUNCTION add_totals(p_now float8, p_queues text[], p_names text[], p_kinds text[])
RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO job_totals AS t (queue, name, processed, failed, dead, retried)
    SELECT q, n, count(*) FILTER (WHERE k = 'processed'), count(*) FILTER (WHERE k = 'failed'),
           count(*) FILTER (WHERE k = 'dead'), count(*) FILTER (WHERE k = 'retried')
    FROM unnest(p_queues, p_names, p_kinds) AS u(q, n, k) WHERE k IS NOT NULL
    GROUP BY q, n ORDER BY q, n
    ON CONFLICT (queue, name) DO UPDATE SET processed = t.processed + excluded.processed,
        failed = t.failed + excluded.failed, dead = t.dead + excluded.dead,
        retried = t.retried + excluded.retried;
    INSERT INTO daily_totals AS t (queue, day, processed, failed)
    SELECT q, to_char(to_timestamp(p_now) AT TIME ZONE 'UTC', 'YYYY-MM-DD'),
           count(*) FILTER (WHERE k = 'processed'), count(*) FILTER (WHERE k IN ('failed', 'dead'))
    FROM unnest(p_queues, p_kinds) AS u(q, k) WHERE k IN ('processed', 'failed', 'dead')
    GROUP BY q ORDER BY q
    ON CONFLICT (queue, day) DO UPDATE SET processed = t.processed + excluded.processed,
        failed = t.failed + excluded.failed;
END
$$;

-- A batch's completion and its callbacks: each callback fires exactly once, enqueued by the
-- transaction that makes it due (the row lock on the batch orders them). A job retried by
-- hand re-opens a finished batch, so `success` may come after `complete`.
CREATE FUNCTION settle_batch(p_now float8, p_id text) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    b record;
    complete boolean;
    cbs json;
    fired text[];
    due text[] := '{}';
    moment text;
    finished float8;
    spec json;
    target text;
BEGIN
    SELECT closed, total, n_succeeded + n_failed + n_dead + n_cancelled AS done, n_succeeded,
           n_dead, callbacks AS cb, callbacks_fired, finished_at
    INTO b FROM batches WHERE id = p_id FOR UPDATE;
    IF NOT FOUND THEN  -- trimmed away while its jobs lived on
        RETURN;
    END IF;
    complete := b.closed AND b.done >= b.total;
    cbs := coalesce(nullif(b.cb, ''), '{}')::json;
    fired := array_remove(string_to_array(b.callbacks_fired, ','), '');
    FOREACH moment IN ARRAY ARRAY['death', 'complete', 'success'] LOOP
        IF ((moment = 'death' AND b.n_dead > 0) OR (moment = 'complete' AND complete)
                OR (moment = 'success' AND complete AND b.n_succeeded >= b.total))
                AND cbs -> moment IS NOT NULL AND NOT moment = ANY(fired) THEN
            due := due || moment;
        END IF;
    END LOOP;
    finished := CASE WHEN complete THEN coalesce(b.finished_at, p_now) END;
    IF cardinality(due) = 0 AND finished IS NOT DISTINCT FROM b.finished_at THEN
        RETURN;
    END IF;
    UPDATE batches SET callbacks_fired = array_to_string(fired || due, ','),
        finished_at = finished WHERE id = p_id;
    FOREACH moment IN ARRAY due LOOP
        spec := cbs -> moment;
        target := spec ->> 'batch_id';
        -- A target batch that cannot take it: enqueued outside it, rather than failing the
        -- transition that completed this batch.
        IF target IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM batches WHERE id = target AND finished_at IS NULL) THEN
            target := NULL;
        END IF;
        PERFORM enqueue(p_now, ARRAY[spec ->> 'id'], ARRAY[spec ->> 'name'],
            ARRAY[spec ->> 'queue'], ARRAY[spec ->> 'payload'],
            ARRAY[coalesce((spec ->> 'max_retries')::integer, 25)],
            ARRAY[(spec ->> 'timeout')::float8], ARRAY[(spec ->> 'deadline')::float8],
            ARRAY[(spec ->> 'run_at')::float8], ARRAY[target],
            ARRAY[CASE WHEN json_typeof(spec -> 'flow') = 'object' THEN (spec -> 'flow')::text END],
            ARRAY[spec -> 'flow' ->> 'unique_key'], ARRAY[(spec -> 'flow' ->> 'unique_for')::float8],
            ARRAY[spec -> 'flow' ->> 'concurrency_key'],
            ARRAY[(spec -> 'flow' ->> 'concurrency_limit')::integer],
            ARRAY[spec -> 'flow' ->> 'order_key'], ARRAY[spec -> 'flow' ->> 'rate_key'],
            ARRAY[(spec -> 'flow' ->> 'rate_limit')::integer],
            ARRAY[(spec -> 'flow' ->> 'rate_period')::float8]);
    END LOOP;
END
$$;

-- Batch counters: moves (batch, from state or NULL for a new job, to state or NULL for a
-- deleted one), applied per batch in id order (two transactions never wait on each other in
-- a circle), then completion and callbacks for every batch a move could complete or re-open.
CREATE FUNCTION batch_moves(p_now float8, p_batches text[], p_from text[], p_to text[])
RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    d record;
BEGIN
    FOR d IN
        SELECT b,
            count(*) FILTER (WHERE f IS NULL) - count(*) FILTER (WHERE t IS NULL) AS total,
            count(*) FILTER (WHERE t = 'scheduled') - count(*) FILTER (WHERE f = 'scheduled') AS scheduled,
            count(*) FILTER (WHERE t = 'pending') - count(*) FILTER (WHERE f = 'pending') AS pending,
            count(*) FILTER (WHERE t = 'active') - count(*) FILTER (WHERE f = 'active') AS active,
            count(*) FILTER (WHERE t = 'retrying') - count(*) FILTER (WHERE f = 'retrying') AS retrying,
            count(*) FILTER (WHERE t = 'succeeded') - count(*) FILTER (WHERE f = 'succeeded') AS succeeded,
            count(*) FILTER (WHERE t = 'failed') - count(*) FILTER (WHERE f = 'failed') AS failed,
            count(*) FILTER (WHERE t = 'dead') - count(*) FILTER (WHERE f = 'dead') AS dead,
            count(*) FILTER (WHERE t = 'cancelled') - count(*) FILTER (WHERE f = 'cancelled') AS cancelled,
            -- only a job created, deleted, or entering or leaving a final state can change
            -- whether the batch is complete
            bool_or(f IS NULL OR t IS NULL
                    OR f IN ('succeeded', 'failed', 'dead', 'cancelled')
                    OR t IN ('succeeded', 'failed', 'dead', 'cancelled')) AS settles
        FROM unnest(p_batches, p_from, p_to) AS m(b, f, t)
        WHERE b IS NOT NULL GROUP BY b ORDER BY b
    LOOP
        IF d.total <> 0 OR d.scheduled <> 0 OR d.pending <> 0 OR d.active <> 0
                OR d.retrying <> 0 OR d.succeeded <> 0 OR d.failed <> 0 OR d.dead <> 0
                OR d.cancelled <> 0 THEN
            UPDATE batches SET total = total + d.total, n_scheduled = n_scheduled + d.scheduled,
                n_pending = n_pending + d.pending, n_active = n_active + d.active,
                n_retrying = n_retrying + d.retrying, n_succeeded = n_succeeded + d.succeeded,
                n_failed = n_failed + d.failed, n_dead = n_dead + d.dead,
                n_cancelled = n_cancelled + d.cancelled,
                started_at = CASE WHEN d.active > 0 THEN coalesce(started_at, p_now)
                                  ELSE started_at END
            WHERE id = d.b;
        END IF;
        IF d.settles THEN
            PERFORM settle_batch(p_now, d.b);
        END IF;
    END LOOP;
END
$$;

-- Enqueue: one call per chunk of jobs, one array per column (all of one length). Text
-- columns arrive as stored (U+0000 escaped, storage/postgres/text.py). Returns, in input
-- order, the id standing for each job (its own, or the holder of its unique key) and whether
-- this call created it; or a single row naming a batch that cannot take jobs (`problem`
-- 'missing' or 'closed'), with nothing written. Unique keys take a transaction advisory lock
-- each (in key order), so two clients enqueueing one key at once create one job.
CREATE FUNCTION enqueue(
    p_now float8, p_ids text[], p_names text[], p_queues text[], p_payloads text[],
    p_max_retries integer[], p_timeouts float8[], p_deadlines float8[], p_run_ats float8[],
    p_batch_ids text[], p_flows text[], p_unique_keys text[], p_unique_fors float8[],
    p_concurrency_keys text[], p_concurrency_limits integer[], p_order_keys text[],
    p_rate_keys text[], p_rate_limits integer[], p_rate_periods float8[])
RETURNS TABLE (stands_for text, created boolean, problem text)
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_now float8 := clock_now(p_now);
    n integer := coalesce(cardinality(p_ids), 0);
    keep boolean[] := array_fill(true, ARRAY[coalesce(cardinality(p_ids), 0)]);
    stand text[] := p_ids;
    taken jsonb := '{}';
    bad record;
    holder text;
    made text[];
    moved_b text[];
    moved_s text[];
    i integer;
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    SELECT w.id, x.id IS NULL AS missing INTO bad
    FROM (SELECT DISTINCT unnest(p_batch_ids) AS id) AS w LEFT JOIN batches x ON x.id = w.id
    WHERE w.id IS NOT NULL AND (x.id IS NULL OR x.finished_at IS NOT NULL)
    ORDER BY w.id LIMIT 1;
    IF FOUND THEN
        RETURN QUERY SELECT bad.id, false, CASE WHEN bad.missing THEN 'missing' ELSE 'closed' END;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_unique_keys) AS k WHERE k IS NOT NULL) THEN
        PERFORM pg_advisory_xact_lock(hashtext('conveyor-unique:' || k))
        FROM (SELECT DISTINCT k FROM unnest(p_unique_keys) AS k WHERE k IS NOT NULL ORDER BY k) s;
        FOR i IN 1..n LOOP
            CONTINUE WHEN p_unique_keys[i] IS NULL;
            IF p_ids[i] = ANY(p_ids[1:i - 1]) OR EXISTS (SELECT 1 FROM jobs WHERE id = p_ids[i]) THEN
                keep[i] := false;  -- stored already: stands for itself, not created
                CONTINUE;
            END IF;
            holder := taken ->> p_unique_keys[i];
            IF holder IS NULL THEN
                SELECT u.job_id INTO holder FROM unique_locks u LEFT JOIN jobs j ON j.id = u.job_id
                WHERE u.key = p_unique_keys[i] AND (u.until > v_now OR (j.state IS NOT NULL
                    AND j.state NOT IN ('succeeded', 'failed', 'dead', 'cancelled')));
            END IF;
            IF holder IS NOT NULL THEN
                keep[i] := false;
                stand[i] := holder;
                CONTINUE;
            END IF;
            INSERT INTO unique_locks (key, job_id, until)
            VALUES (p_unique_keys[i], p_ids[i], v_now + coalesce(p_unique_fors[i], 0))
            ON CONFLICT (key) DO UPDATE SET job_id = excluded.job_id, until = excluded.until;
            taken := taken || jsonb_build_object(p_unique_keys[i], p_ids[i]);
        END LOOP;
    END IF;
    WITH r AS (
        SELECT u.*, CASE WHEN u.run_at IS NOT NULL AND u.run_at > v_now THEN 'scheduled'
                         ELSE 'pending' END AS state
        FROM unnest(p_ids, p_names, p_queues, p_payloads, p_max_retries, p_timeouts,
                    p_deadlines, p_run_ats, p_batch_ids, p_flows, p_unique_keys,
                    p_concurrency_keys, p_concurrency_limits, p_order_keys, p_rate_keys,
                    p_rate_limits, p_rate_periods)
            WITH ORDINALITY AS u(id, name, queue, payload, max_retries, timeout, deadline,
                                 run_at, batch_id, flow, unique_key, ckey, climit, okey, rkey,
                                 rlimit, rperiod, ord)
    ), ins AS (
        INSERT INTO jobs (id, name, queue, payload, state, max_retries, timeout, deadline,
            created_at, run_at, ready_at, batch_id, flow, unique_key, concurrency_key,
            concurrency_limit, order_key, rate_key, rate_limit, rate_period, gated, events)
        SELECT r.id, r.name, r.queue, r.payload, r.state, coalesce(r.max_retries, 25),
            r.timeout, r.deadline, v_now, r.run_at,
            CASE WHEN r.state = 'pending' THEN v_now END, r.batch_id, r.flow, r.unique_key,
            r.ckey, coalesce(r.climit, 0), r.okey, r.rkey, coalesce(r.rlimit, 0),
            coalesce(r.rperiod, 0), r.ckey IS NOT NULL OR r.okey IS NOT NULL OR r.rkey IS NOT NULL,
            event_line(v_now, CASE WHEN r.state = 'pending' THEN 'enqueued' ELSE 'scheduled' END,
                       r.state)
        FROM r WHERE keep[r.ord::integer] ORDER BY r.ord  -- seq follows the input order
        ON CONFLICT (id) DO NOTHING
        RETURNING id, batch_id, state
    )
    SELECT array_agg(ins.id), array_agg(ins.batch_id) FILTER (WHERE ins.batch_id IS NOT NULL),
           array_agg(ins.state) FILTER (WHERE ins.batch_id IS NOT NULL)
    INTO made, moved_b, moved_s FROM ins;
    INSERT INTO queues (name)
    SELECT DISTINCT q FROM unnest(p_queues) AS q
    WHERE NOT EXISTS (SELECT 1 FROM queues WHERE name = q)
    ON CONFLICT DO NOTHING;
    IF moved_b IS NOT NULL THEN
        PERFORM batch_moves(v_now, moved_b, array_fill(NULL::text, ARRAY[cardinality(moved_b)]),
                            moved_s);
    END IF;
    -- An id stored before (or by another transaction since): not created by this call; of
    -- one id given twice, only the first is.
    RETURN QUERY
    SELECT CASE WHEN keep[u.ord::integer] THEN u.id ELSE stand[u.ord::integer] END,
           keep[u.ord::integer] AND c.id IS NOT NULL
               AND u.ord = min(u.ord) FILTER (WHERE keep[u.ord::integer])
                               OVER (PARTITION BY u.id),
           NULL::text
    FROM unnest(p_ids) WITH ORDINALITY AS u(id, ord)
    LEFT JOIN unnest(made) AS c(id) ON c.id = u.id
    ORDER BY u.ord;
END
$$;

-- Flow control: ids of up to `p_need` pending jobs of one queue that their concurrency,
-- order and rate limits admit now, in queue order. The caller holds the gate lock, so
-- counting a limit and taking it never interleave between transactions. At most 4096
-- pending jobs are looked at per call, bounding the work when many are held back.
CREATE FUNCTION flow_pick(p_now float8, p_queue text, p_need integer) RETURNS text[]
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    r record;
    chosen text[] := '{}';
    active jsonb := '{}';       -- concurrency key -> active jobs, counting this call's
    order_first jsonb := '{}';  -- order key -> the oldest unfinished job's id
    order_taken text[] := '{}';
    rate_used jsonb := '{}';    -- rate key -> starts within its window
BEGIN
    FOR r IN
        SELECT id, concurrency_key AS ckey, concurrency_limit AS climit, order_key AS okey,
               rate_key AS rkey, rate_limit AS rlimit, rate_period AS rperiod
        FROM jobs WHERE state = 'pending' AND queue = p_queue
        ORDER BY ready_at, seq LIMIT 4096
    LOOP
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

-- Dequeue: lease up to `p_count` pending jobs, queue by queue in the order given. A paused
-- queue is skipped; jobs whose deadline passed are moved to dead (expired) first; a queue
-- holding flow-controlled jobs is walked by flow_pick under the gate lock; any other queue
-- is one UPDATE over rows picked FOR UPDATE SKIP LOCKED, so many workers lease from one
-- queue without waiting on each other. Rows come back in queue order, (ready_at, seq)
-- within a queue; batch counters move in the same call.
CREATE FUNCTION dequeue(p_now float8, p_queues text[], p_worker text, p_count integer,
                        p_lease float8)
RETURNS TABLE (id text, name text, queue text, payload text, token text, attempt integer,
               errors integer, max_retries integer, timeout float8, batch_id text,
               recoveries integer)
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    v_now float8 := clock_now(p_now);
    q text;
    seen text[] := '{}';
    got integer := 0;
    need integer;
    ids text[];
    r record;
    b_ids text[] := '{}';
    b_from text[] := '{}';
    b_to text[] := '{}';
BEGIN
    FOREACH q IN ARRAY p_queues LOOP
        CONTINUE WHEN q = ANY(seen);
        seen := seen || q;
        need := p_count - got;
        EXIT WHEN need <= 0;
        CONTINUE WHEN coalesce((SELECT paused FROM queues WHERE name = q), false);
        IF EXISTS (SELECT 1 FROM jobs WHERE state = 'pending' AND queue = q
                   AND deadline IS NOT NULL AND deadline < v_now) THEN
            FOR r IN
                UPDATE jobs SET state = 'dead',
                    message = 'deadline passed before the job could start',
                    finished_at = v_now, token = NULL, lease_expires_at = NULL,
                    cancel_requested = false,
                    events = events || event_line(v_now, 'expired', 'dead',
                        '"deadline passed before the job could start"', NULL, attempt)
                WHERE id IN (SELECT id FROM jobs WHERE state = 'pending' AND queue = q
                             AND deadline IS NOT NULL AND deadline < v_now
                             FOR UPDATE SKIP LOCKED)
                RETURNING batch_id
            LOOP
                IF r.batch_id IS NOT NULL THEN
                    b_ids := b_ids || r.batch_id;
                    b_from := b_from || 'pending'::text;
                    b_to := b_to || 'dead'::text;
                END IF;
            END LOOP;
        END IF;
        IF EXISTS (SELECT 1 FROM jobs WHERE state = 'pending' AND gated AND queue = q) THEN
            PERFORM pg_advisory_xact_lock(hashtext('conveyor-gate:' || current_schema()));
            -- flow_pick reads without row locks: lock the admitted jobs still pending. The
            -- state test is written so that it matches no partial index: with statistics
            -- that see few pending jobs, the planner would otherwise walk every pending job
            -- of the index instead of looking the ids up.
            ids := flow_pick(v_now, q, need);
            SELECT array_agg(s.id) INTO ids FROM (
                SELECT id FROM jobs WHERE id = ANY(ids) AND coalesce(state, '') = 'pending'
                ORDER BY id FOR UPDATE) AS s;
        ELSE
            SELECT array_agg(s.id) INTO ids FROM (
                SELECT id FROM jobs WHERE state = 'pending' AND queue = q
                ORDER BY ready_at, seq LIMIT need FOR UPDATE SKIP LOCKED) AS s;
        END IF;
        CONTINUE WHEN ids IS NULL OR cardinality(ids) = 0;
        FOR r IN
            WITH leased AS (
                UPDATE jobs SET state = 'active', attempt = attempt + 1, worker = p_worker,
                    token = replace(gen_random_uuid()::text, '-', ''),
                    lease_expires_at = v_now + p_lease, started_at = v_now,
                    cancel_requested = false,
                    events = events || event_line(v_now, 'started', 'active', NULL, p_worker,
                                                  attempt + 1)
                WHERE id = ANY(ids)  -- locked above, still pending
                RETURNING id, name, queue, payload, token, attempt, errors, max_retries,
                          timeout, batch_id, recoveries, ready_at, seq
            )
            SELECT * FROM leased ORDER BY ready_at, seq
        LOOP
            got := got + 1;
            IF r.batch_id IS NOT NULL THEN
                b_ids := b_ids || r.batch_id;
                b_from := b_from || 'pending'::text;
                b_to := b_to || 'active'::text;
            END IF;
            RETURN QUERY SELECT r.id, r.name, r.queue, r.payload, r.token, r.attempt, r.errors,
                r.max_retries, r.timeout, r.batch_id, r.recoveries;
        END LOOP;
    END LOOP;
    IF cardinality(b_ids) > 0 THEN
        PERFORM batch_moves(v_now, b_ids, b_from, b_to);
    END IF;
END
$$;

-- Acknowledge a group of jobs (a worker's group commit) in one call, fenced by lease token.
-- Per ack (arrays in ack order): the outcome as given (state, final event kind, message as
-- stored and as JSON, event data as JSON, what it counts as in the totals), whether a
-- pending cancel request turns it into `cancelled` (`cancels`) and the message and data it
-- then has, the errors it adds, result, progress, retry delay and the events the job wrote.
-- Rows are locked in id order (no deadlock between ackers). Of the acks naming one job only
-- the first whose token is its live lease applies; every other ack of a stored job is
-- refused with an `ack_refused` event. Returns applied-or-refused per ack, in order.
CREATE FUNCTION ack(
    p_now float8, p_ids text[], p_tokens text[], p_outcomes text[], p_states text[],
    p_kinds text[], p_messages text[], p_message_json text[], p_data text[], p_counted text[],
    p_cancels boolean[], p_cancel_messages text[], p_cancel_message_json text[],
    p_cancel_data text[], p_errors integer[], p_results text[], p_progress text[],
    p_retry_in float8[], p_events text[])
RETURNS boolean[]
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_now float8 := clock_now(p_now);
    n integer := coalesce(cardinality(p_ids), 0);
    ok boolean[] := array_fill(false, ARRAY[coalesce(cardinality(p_ids), 0)]);
    won_ids text[];
    won_ords integer[];
    t_queues text[];
    t_names text[];
    t_kinds text[];
    b_ids text[];
    b_to text[];
    o integer;
BEGIN
    IF n = 0 THEN
        RETURN ok;
    END IF;
    PERFORM 1 FROM jobs WHERE id = ANY(p_ids) ORDER BY id FOR UPDATE;
    WITH a AS (
        SELECT * FROM unnest(p_ids, p_tokens, p_states, p_kinds, p_messages, p_message_json,
                             p_data, p_counted, p_cancels, p_cancel_messages,
                             p_cancel_message_json, p_cancel_data, p_errors, p_results,
                             p_progress, p_retry_in, p_events)
            WITH ORDINALITY AS a(id, token, state, kind, message, mjson, data, counted,
                                 cancels, cmessage, cmjson, cdata, errs, result, progress,
                                 retry_in, events, ord)
    ), w AS (
        SELECT DISTINCT ON (a.id) a.*, j.cancel_requested AND a.cancels AS cx
        FROM a JOIN jobs j ON j.id = a.id
        WHERE j.state = 'active' AND j.token = a.token
        ORDER BY a.id, a.ord
    ), u AS (
        UPDATE jobs SET
            state = CASE WHEN w.cx THEN 'cancelled' ELSE w.state END,
            errors = jobs.errors + w.errs,
            result = coalesce(w.result, jobs.result),
            message = CASE WHEN w.cx THEN w.cmessage ELSE w.message END,
            progress = coalesce(w.progress, jobs.progress),
            run_at = CASE WHEN NOT w.cx AND w.state = 'retrying' THEN v_now + w.retry_in
                          ELSE jobs.run_at END,
            ready_at = CASE WHEN NOT w.cx AND w.state = 'pending' THEN v_now
                            ELSE jobs.ready_at END,
            finished_at = CASE WHEN w.cx OR w.state IN ('succeeded', 'failed', 'dead',
                                                       'cancelled') THEN v_now END,
            token = NULL, lease_expires_at = NULL,
            events = jobs.events || coalesce(w.events, '') || CASE WHEN w.cx
                THEN event_line(v_now, 'cancelled', 'cancelled', w.cmjson, jobs.worker,
                                jobs.attempt, w.cdata)
                ELSE event_line(v_now, w.kind, w.state, w.mjson, jobs.worker, jobs.attempt,
                                w.data) END
        FROM w WHERE jobs.id = w.id
        RETURNING jobs.id, w.ord, jobs.queue, jobs.name, jobs.batch_id, jobs.state,
                  CASE WHEN w.cx THEN NULL ELSE w.counted END AS counted
    )
    SELECT array_agg(u.id), array_agg(u.ord::integer),
           array_agg(u.queue) FILTER (WHERE u.counted IS NOT NULL),
           array_agg(u.name) FILTER (WHERE u.counted IS NOT NULL),
           array_agg(u.counted) FILTER (WHERE u.counted IS NOT NULL),
           array_agg(u.batch_id) FILTER (WHERE u.batch_id IS NOT NULL),
           array_agg(u.state) FILTER (WHERE u.batch_id IS NOT NULL)
    INTO won_ids, won_ords, t_queues, t_names, t_kinds, b_ids, b_to FROM u;
    FOREACH o IN ARRAY coalesce(won_ords, '{}') LOOP
        ok[o] := true;
    END LOOP;
    -- Refusals, after the applied acks (as on every backend): the state the job was in when
    -- the ack came, none when an earlier ack of this call had just ended the attempt.
    UPDATE jobs SET events = jobs.events || f.lines
    FROM (
        SELECT a.id, string_agg(event_line(v_now, 'ack_refused',
                   CASE WHEN w.ord IS NULL THEN j.state WHEN w.ord < a.ord THEN NULL
                        ELSE 'active' END,
                   to_json('stale lease: ' || a.outcome || ' refused')::text, NULL, 0,
                   json_build_object('token', a.token, 'outcome', a.outcome)::text),
                   '' ORDER BY a.ord) AS lines
        FROM unnest(p_ids, p_tokens, p_outcomes) WITH ORDINALITY AS a(id, token, outcome, ord)
        JOIN jobs j ON j.id = a.id
        LEFT JOIN unnest(won_ids, won_ords) AS w(id, ord) ON w.id = a.id
        WHERE w.ord IS DISTINCT FROM a.ord::integer
        GROUP BY a.id
    ) AS f WHERE jobs.id = f.id;
    IF t_kinds IS NOT NULL THEN
        PERFORM add_totals(v_now, t_queues, t_names, t_kinds);
    END IF;
    IF b_ids IS NOT NULL THEN
        PERFORM batch_moves(v_now, b_ids, array_fill('active'::text, ARRAY[cardinality(b_ids)]),
                            b_to);
    END IF;
    RETURN ok;
END
$$;

-- Heartbeat: register (or refresh) the worker, take its pending remote command, and extend
-- every lease it still holds. Returns the command and, per lease still held, its job id and
-- whether a cancel was requested; jobs not returned were lost.
CREATE FUNCTION heartbeat(p_now float8, p_worker text, p_info text, p_ids text[],
                          p_tokens text[], p_lease float8)
RETURNS TABLE (command text, held_id text, cancel boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan AS $$
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

-- Recover active jobs whose attempt was lost (the caller has locked them): back to pending
-- (`recovered`, not an error attempt), dead once recovered more than `p_max` times (a
-- poison job), cancelled when a cancel request was waiting. `p_why` says how the attempt was
-- lost and `p_cancelled` is the message of a job a cancel request then ends
-- (storage/rules.py). Returns how many went back to pending.
CREATE FUNCTION recover(p_now float8, p_ids text[], p_max integer, p_why text,
                        p_cancelled text) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    back integer;
    t_queues text[];
    t_names text[];
    b_ids text[];
    b_to text[];
BEGIN
    WITH r AS (
        SELECT id,
            CASE WHEN cancel_requested THEN 'cancelled'
                 WHEN recoveries + 1 <= p_max THEN 'pending' ELSE 'dead' END AS to_state,
            CASE WHEN cancel_requested THEN p_cancelled
                 WHEN recoveries + 1 <= p_max THEN p_why
                 ELSE 'recovered ' || (recoveries + 1) || ' times (poison job?)' END AS msg
        FROM jobs WHERE id = ANY(p_ids) AND state = 'active'
    ), u AS (
        UPDATE jobs SET state = r.to_state, recoveries = jobs.recoveries + 1,
            message = CASE WHEN r.to_state = 'pending' THEN jobs.message ELSE r.msg END,
            ready_at = CASE WHEN r.to_state = 'pending' THEN p_now ELSE jobs.ready_at END,
            finished_at = CASE WHEN r.to_state = 'pending' THEN NULL ELSE p_now END,
            token = NULL, lease_expires_at = NULL,
            cancel_requested = CASE WHEN r.to_state = 'dead' THEN false
                                    ELSE jobs.cancel_requested END,
            events = jobs.events || event_line(p_now,
                CASE r.to_state WHEN 'pending' THEN 'recovered' ELSE r.to_state END,
                r.to_state, to_json(r.msg)::text, NULL, jobs.attempt)
        FROM r WHERE jobs.id = r.id
        RETURNING jobs.queue, jobs.name, jobs.batch_id, r.to_state
    )
    SELECT count(*) FILTER (WHERE u.to_state = 'pending'),
           array_agg(u.queue) FILTER (WHERE u.to_state = 'dead'),
           array_agg(u.name) FILTER (WHERE u.to_state = 'dead'),
           array_agg(u.batch_id) FILTER (WHERE u.batch_id IS NOT NULL),
           array_agg(u.to_state) FILTER (WHERE u.batch_id IS NOT NULL)
    INTO back, t_queues, t_names, b_ids, b_to FROM u;
    IF t_queues IS NOT NULL THEN
        PERFORM add_totals(p_now, t_queues, t_names,
                           array_fill('dead'::text, ARRAY[cardinality(t_queues)]));
    END IF;
    IF b_ids IS NOT NULL THEN
        PERFORM batch_moves(p_now, b_ids, array_fill('active'::text, ARRAY[cardinality(b_ids)]),
                            b_to);
    END IF;
    RETURN back;
END
$$;

-- Jobs whose lease expired (or was never set) → recovered; rows another transaction holds
-- are skipped (the next call gets them). Returns how many jobs were recovered.
CREATE FUNCTION reclaim(p_now float8, p_max integer, p_limit integer, p_why text,
                        p_cancelled text) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now float8 := clock_now(p_now);
    ids text[];
BEGIN
    SELECT array_agg(id) INTO ids FROM (
        SELECT id FROM jobs WHERE state = 'active'
            AND (lease_expires_at <= v_now OR lease_expires_at IS NULL)
        LIMIT p_limit FOR UPDATE SKIP LOCKED) AS s;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM recover(v_now, ids, p_max, p_why, p_cancelled);
    RETURN cardinality(ids);
END
$$;

-- Every job one worker holds → recovered, and the worker unregistered. Waits for rows an
-- ack is writing, so a job the dead worker acknowledged just before dying is not recovered
-- as well. Returns how many jobs were recovered.
CREATE FUNCTION release_worker(p_now float8, p_worker text, p_max integer, p_why text,
                               p_cancelled text) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_now float8 := clock_now(p_now);
    ids text[];
BEGIN
    SELECT array_agg(id) INTO ids FROM (
        SELECT id FROM jobs WHERE state = 'active' AND worker = p_worker
        ORDER BY id FOR UPDATE) AS s;
    IF ids IS NOT NULL THEN
        PERFORM recover(v_now, ids, p_max, p_why, p_cancelled);
    END IF;
    DELETE FROM workers WHERE id = p_worker;
    RETURN coalesce(cardinality(ids), 0);
END
$$;

-- Scheduled and retrying jobs whose time has come → pending, oldest first; rows another
-- transaction holds are skipped. Returns how many moved.
CREATE FUNCTION promote(p_now float8, p_limit integer) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_now float8 := clock_now(p_now);
    moved integer;
    b_ids text[];
    b_from text[];
BEGIN
    WITH due AS (
        SELECT id, state FROM jobs WHERE state IN ('scheduled', 'retrying') AND run_at <= v_now
        ORDER BY run_at LIMIT p_limit FOR UPDATE SKIP LOCKED
    ), u AS (
        UPDATE jobs SET state = 'pending', ready_at = v_now,
            events = jobs.events || event_line(v_now, 'enqueued', 'pending', NULL, NULL,
                                               jobs.attempt)
        FROM due WHERE jobs.id = due.id
        RETURNING jobs.batch_id, due.state AS was
    )
    SELECT count(*), array_agg(u.batch_id) FILTER (WHERE u.batch_id IS NOT NULL),
           array_agg(u.was) FILTER (WHERE u.batch_id IS NOT NULL)
    INTO moved, b_ids, b_from FROM u;
    IF b_ids IS NOT NULL THEN
        PERFORM batch_moves(v_now, b_ids, b_from,
                            array_fill('pending'::text, ARRAY[cardinality(b_ids)]));
    END IF;
    RETURN moved;
END
$$;
