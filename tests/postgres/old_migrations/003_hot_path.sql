-- conveyor PostgreSQL schema, version 3: indexes the hot path cannot be misled by, and
-- fewer statements per call in the hot-path functions.
--
-- Upgrades in place: every job is kept; indexes, functions and the batch counters' meaning
-- change (the new indexes are built in this migration's transaction, which holds writers
-- back for as long as building them takes: about 3 s per million jobs on a small machine).
--
-- * jobs_state_queue (state, queue) held every job, finished ones included, and it could
--   serve dequeue's `state = 'pending' AND queue = $1` too: on a table not yet analyzed (a
--   fresh schema, or right after a big enqueue) the planner then sorted every pending job on
--   each lease instead of walking jobs_ready in order. The live states are counted on their
--   own partial indexes instead (pending: jobs_ready, active: jobs_active, scheduled and
--   retrying: jobs_due) and the finished ones on jobs_done.
-- * jobs_lease and jobs_worker (both over active jobs) become one index, jobs_active: a lease
--   takes one index entry fewer, and a heartbeat, which only moves lease_expires_at, no longer
--   changes an indexed column, so PostgreSQL can update the row in place (HOT). Reclaiming
--   expired leases reads the active jobs, which are bounded by the workers' slots.
-- * jobs_finished (rows with finished_at set) becomes jobs_done, over the finished states
--   themselves, so a count or a page of `state = 'succeeded'` can use it, and it carries the
--   queue, so counting finished jobs per queue reads the index alone.

DROP INDEX jobs_state_queue;
DROP INDEX jobs_lease;
DROP INDEX jobs_worker;
DROP INDEX jobs_finished;
-- * Vacuum as often on a table of a million finished jobs as on an empty one. A lease walks
--   jobs_ready from the oldest pending job; the entries of jobs already leased stay at its
--   head until VACUUM removes them, and autovacuum's default trigger (20% of the table
--   changed) grows with the finished jobs kept: 200,000 changes on a million rows, so the
--   head of jobs_ready grew for minutes and every lease walked it. A fixed threshold keeps
--   it short whatever the table holds (VACUUM skips the all-visible pages of finished jobs).
ALTER TABLE jobs SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
                      autovacuum_vacuum_insert_scale_factor = 0,
                      autovacuum_vacuum_insert_threshold = 10000);
CREATE INDEX jobs_active ON jobs (worker) WHERE state = 'active';
CREATE INDEX jobs_done ON jobs (state, finished_at) INCLUDE (queue)
    WHERE state IN ('succeeded', 'failed', 'dead', 'cancelled');

-- The functions below replace those of version 2 with the same arguments and results. Each
-- statement a PL/pgSQL function runs costs an executor start and end, which for the small
-- calls of the hot path (one job enqueued, eight leased or acknowledged) weighed more than
-- the rows they touch (perf on the server). So:
-- * enqueue tests for batches and unique keys on the arrays (a PL/pgSQL expression, no
--   statement) and registers new queues in its INSERT statement;
-- * dequeue collects the leased rows into arrays with the UPDATE that leases them and
--   returns them with one statement, instead of one RETURN QUERY per job, and checks for
--   expired and flow-controlled jobs in one statement;
-- * ack writes the ack_refused events only when some ack was refused;
-- * add_totals updates both totals tables in one statement;
-- * batch counters: a lease no longer writes the batch's row. Every dequeue and every ack of
--   a batch's jobs used to update that one row, so the worker's fetcher and acker (and every
--   worker process on the batch) queued behind each other's row lock. `n_pending` now counts
--   the batch's pending and active jobs together and `n_active` stays 0; readers count the
--   active ones on jobs_batch (at most the workers' slots) and subtract them
--   (storage/postgres/batches.py, BATCH_FROM). Only the first lease writes the row, to set
--   started_at.

UPDATE batches SET n_pending = n_pending + n_active, n_active = 0 WHERE n_active <> 0;

CREATE OR REPLACE FUNCTION add_totals(p_now float8, p_queues text[], p_names text[], p_kinds text[])
RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    WITH all_time AS (  -- both tables in one statement
    INSERT INTO job_totals AS t (queue, name, processed, failed, dead, retried)
    SELECT q, n, count(*) FILTER (WHERE k = 'processed'), count(*) FILTER (WHERE k = 'failed'),
           count(*) FILTER (WHERE k = 'dead'), count(*) FILTER (WHERE k = 'retried')
    FROM unnest(p_queues, p_names, p_kinds) AS u(q, n, k) WHERE k IS NOT NULL
    GROUP BY q, n ORDER BY q, n
    ON CONFLICT (queue, name) DO UPDATE SET processed = t.processed + excluded.processed,
        failed = t.failed + excluded.failed, dead = t.dead + excluded.dead,
        retried = t.retried + excluded.retried
    )
    INSERT INTO daily_totals AS d (queue, day, processed, failed)
    SELECT q, to_char(to_timestamp(p_now) AT TIME ZONE 'UTC', 'YYYY-MM-DD'),
           count(*) FILTER (WHERE k = 'processed'), count(*) FILTER (WHERE k IN ('failed', 'dead'))
    FROM unnest(p_queues, p_kinds) AS u(q, k) WHERE k IN ('processed', 'failed', 'dead')
    GROUP BY q ORDER BY q
    ON CONFLICT (queue, day) DO UPDATE SET processed = d.processed + excluded.processed,
        failed = d.failed + excluded.failed;
END
$$;

CREATE OR REPLACE FUNCTION enqueue(
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
    -- Tests on the arrays alone are PL/pgSQL expressions, evaluated without a statement.
    IF cardinality(array_remove(p_batch_ids, NULL)) > 0 THEN
        SELECT w.id, x.id IS NULL AS missing INTO bad
        FROM (SELECT DISTINCT unnest(p_batch_ids) AS id) AS w LEFT JOIN batches x ON x.id = w.id
        WHERE w.id IS NOT NULL AND (x.id IS NULL OR x.finished_at IS NOT NULL)
        ORDER BY w.id LIMIT 1;
        IF FOUND THEN
            RETURN QUERY SELECT bad.id, false,
                CASE WHEN bad.missing THEN 'missing' ELSE 'closed' END;
            RETURN;
        END IF;
    END IF;
    IF cardinality(array_remove(p_unique_keys, NULL)) > 0 THEN
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
    ), new_queues AS (  -- in the same statement: one statement fewer per enqueue
        INSERT INTO queues (name)
        SELECT DISTINCT q FROM unnest(p_queues) AS q
        WHERE NOT EXISTS (SELECT 1 FROM queues WHERE name = q)
        ON CONFLICT DO NOTHING
    )
    SELECT array_agg(ins.id), array_agg(ins.batch_id) FILTER (WHERE ins.batch_id IS NOT NULL),
           array_agg(ins.state) FILTER (WHERE ins.batch_id IS NOT NULL)
    INTO made, moved_b, moved_s FROM ins;
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

CREATE OR REPLACE FUNCTION dequeue(p_now float8, p_queues text[], p_worker text, p_count integer,
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
    has_expired boolean;
    has_gated boolean;
    -- the leased jobs, column by column, in the order they are returned
    o_id text[] := '{}'; o_name text[] := '{}'; o_queue text[] := '{}';
    o_payload text[] := '{}'; o_token text[] := '{}'; o_attempt integer[] := '{}';
    o_errors integer[] := '{}'; o_max_retries integer[] := '{}'; o_timeout float8[] := '{}';
    o_batch_id text[] := '{}'; o_recoveries integer[] := '{}';
    l_id text[]; l_name text[]; l_queue text[]; l_payload text[]; l_token text[];
    l_attempt integer[]; l_errors integer[]; l_max_retries integer[]; l_timeout float8[];
    l_batch_id text[]; l_recoveries integer[]; l_batches text[];
BEGIN
    FOREACH q IN ARRAY p_queues LOOP
        CONTINUE WHEN q = ANY(seen);
        seen := seen || q;
        need := p_count - got;
        EXIT WHEN need <= 0;
        CONTINUE WHEN coalesce((SELECT paused FROM queues WHERE name = q), false);
        SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'pending' AND queue = q
                       AND deadline IS NOT NULL AND deadline < v_now),
               EXISTS (SELECT 1 FROM jobs WHERE state = 'pending' AND gated AND queue = q)
        INTO has_expired, has_gated;
        IF has_expired THEN
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
        IF has_gated THEN
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
        SELECT array_agg(id ORDER BY ready_at, seq), array_agg(name ORDER BY ready_at, seq),
            array_agg(queue ORDER BY ready_at, seq), array_agg(payload ORDER BY ready_at, seq),
            array_agg(token ORDER BY ready_at, seq), array_agg(attempt ORDER BY ready_at, seq),
            array_agg(errors ORDER BY ready_at, seq),
            array_agg(max_retries ORDER BY ready_at, seq),
            array_agg(timeout ORDER BY ready_at, seq), array_agg(batch_id ORDER BY ready_at, seq),
            array_agg(recoveries ORDER BY ready_at, seq),
            array_agg(batch_id) FILTER (WHERE batch_id IS NOT NULL)
        INTO l_id, l_name, l_queue, l_payload, l_token, l_attempt, l_errors, l_max_retries,
             l_timeout, l_batch_id, l_recoveries, l_batches
        FROM leased;
        CONTINUE WHEN l_id IS NULL;
        got := got + cardinality(l_id);
        o_id := o_id || l_id; o_name := o_name || l_name; o_queue := o_queue || l_queue;
        o_payload := o_payload || l_payload; o_token := o_token || l_token;
        o_attempt := o_attempt || l_attempt; o_errors := o_errors || l_errors;
        o_max_retries := o_max_retries || l_max_retries; o_timeout := o_timeout || l_timeout;
        o_batch_id := o_batch_id || l_batch_id; o_recoveries := o_recoveries || l_recoveries;
        IF l_batches IS NOT NULL THEN
            b_ids := b_ids || l_batches;
            b_from := b_from || array_fill('pending'::text, ARRAY[cardinality(l_batches)]);
            b_to := b_to || array_fill('active'::text, ARRAY[cardinality(l_batches)]);
        END IF;
    END LOOP;
    IF cardinality(b_ids) > 0 THEN
        PERFORM batch_moves(v_now, b_ids, b_from, b_to);
    END IF;
    RETURN QUERY SELECT * FROM unnest(o_id, o_name, o_queue, o_payload, o_token, o_attempt,
        o_errors, o_max_retries, o_timeout, o_batch_id, o_recoveries);
END
$$;

CREATE OR REPLACE FUNCTION ack(
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
    -- the ack came, none when an earlier ack of this call had just ended the attempt. When
    -- every ack applied there is none, and no statement to run.
    IF coalesce(cardinality(won_ords), 0) < n THEN
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
    END IF;
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

-- Batch counters: as in version 2, except that active counts as pending (above).
CREATE OR REPLACE FUNCTION batch_moves(p_now float8, p_batches text[], p_from text[], p_to text[])
RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    d record;
BEGIN
    FOR d IN
        SELECT b,
            count(*) FILTER (WHERE f IS NULL) - count(*) FILTER (WHERE t IS NULL) AS total,
            count(*) FILTER (WHERE t = 'scheduled') - count(*) FILTER (WHERE f = 'scheduled') AS scheduled,
            count(*) FILTER (WHERE t = 'pending') - count(*) FILTER (WHERE f = 'pending') AS pending,
            count(*) FILTER (WHERE t = 'retrying') - count(*) FILTER (WHERE f = 'retrying') AS retrying,
            count(*) FILTER (WHERE t = 'succeeded') - count(*) FILTER (WHERE f = 'succeeded') AS succeeded,
            count(*) FILTER (WHERE t = 'failed') - count(*) FILTER (WHERE f = 'failed') AS failed,
            count(*) FILTER (WHERE t = 'dead') - count(*) FILTER (WHERE f = 'dead') AS dead,
            count(*) FILTER (WHERE t = 'cancelled') - count(*) FILTER (WHERE f = 'cancelled') AS cancelled,
            -- only a job created, deleted, or entering or leaving a final state can change
            -- whether the batch is complete
            bool_or(f IS NULL OR t IS NULL
                    OR f IN ('succeeded', 'failed', 'dead', 'cancelled')
                    OR t IN ('succeeded', 'failed', 'dead', 'cancelled')) AS settles,
            bool_or(starts) AS starts
        -- active counts as pending (n_pending holds both): a lease moves no counter
        FROM (SELECT u.b, CASE WHEN u.f = 'active' THEN 'pending' ELSE u.f END AS f,
                     CASE WHEN u.t = 'active' THEN 'pending' ELSE u.t END AS t,
                     u.t = 'active' AS starts
              FROM unnest(p_batches, p_from, p_to) AS u(b, f, t)) AS m
        WHERE b IS NOT NULL GROUP BY b ORDER BY b
    LOOP
        IF d.total <> 0 OR d.scheduled <> 0 OR d.pending <> 0
                OR d.retrying <> 0 OR d.succeeded <> 0 OR d.failed <> 0 OR d.dead <> 0
                OR d.cancelled <> 0 THEN
            UPDATE batches SET total = total + d.total, n_scheduled = n_scheduled + d.scheduled,
                n_pending = n_pending + d.pending,
                n_retrying = n_retrying + d.retrying, n_succeeded = n_succeeded + d.succeeded,
                n_failed = n_failed + d.failed, n_dead = n_dead + d.dead,
                n_cancelled = n_cancelled + d.cancelled,
                started_at = CASE WHEN d.starts THEN coalesce(started_at, p_now)
                                  ELSE started_at END
            WHERE id = d.b;
        ELSIF d.starts THEN
            -- a lease: the batch row is written (and locked) only by its first one; after
            -- that the condition is false and the row is neither locked nor waited for
            UPDATE batches SET started_at = p_now WHERE id = d.b AND started_at IS NULL;
        END IF;
        IF d.settles THEN
            PERFORM settle_batch(p_now, d.b);
        END IF;
    END LOOP;
END
$$;
