-- Dequeue the long way, for calls whose queues hold a job past its deadline or under flow
-- control (dequeue sends them here): queue by queue in the order given, a paused queue is
-- skipped; jobs whose deadline passed are moved to dead (expired) first; a queue holding
-- flow-controlled jobs is walked by flow_pick under the gate lock; in any other queue the
-- oldest jobs, ungated and in time, are locked FOR UPDATE SKIP LOCKED (a gated or expired job
-- stored since the look is left to the next call's rules) and leased by one UPDATE. A queue
-- holding a lined job (line_job.sql) is walked by lineup_pick instead: its jobs come back in
-- the walk's order, each costing its `cost` of p_count's slots (p_capacity: the most one may
-- cost, 0 for no bound). Other rows come back in queue order, (ready_at, seq) within a queue;
-- batch counters move, and a job started while its breaker is open becomes its probe
-- (breaker.sql), in the same call.
CREATE OR REPLACE FUNCTION dequeue_each(p_now float8, p_queues text[], p_worker text,
                                        p_count integer, p_lease float8, p_capacity integer)
RETURNS TABLE (id text, name text, queue text, payload text, token text, attempt integer,
               errors integer, max_retries integer, timeout float8, batch_id text,
               recoveries integer, cost integer)
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
#variable_conflict use_column
DECLARE
    v_now float8 := clock_now(p_now);
    q text;
    seen text[] := '{}';
    got integer := 0;
    need integer;
    ids text[];
    walked text[];  -- lineup_pick's order
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
    o_batch_id text[] := '{}'; o_recoveries integer[] := '{}'; o_cost integer[] := '{}';
    l_id text[]; l_name text[]; l_queue text[]; l_payload text[]; l_token text[];
    l_attempt integer[]; l_errors integer[]; l_max_retries integer[]; l_timeout float8[];
    l_batch_id text[]; l_recoveries integer[]; l_batches text[]; l_cost integer[];
    l_breakers text[];
    l_spent integer;
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
            -- the time the gates are read at: an ack that moved a breaker while this call
            -- waited for the lock wrote its time after taking the lock too (breaker_acks)
            v_now := clock_now(p_now);
            -- lineup_pick and flow_pick read without row locks: lock the admitted jobs still
            -- pending. The
            -- state test is written so that it matches no partial index: with statistics
            -- that see few pending jobs, the planner would otherwise walk every pending job
            -- of the index instead of looking the ids up.
            IF EXISTS (SELECT 1 FROM jobs WHERE state = 'pending' AND lined AND queue = q) THEN
                walked := lineup_pick(v_now, q, need, p_capacity);
                ids := walked;
            ELSE
                walked := NULL;
                ids := flow_pick(v_now, q, need);
            END IF;
            SELECT array_agg(s.id) INTO ids FROM (
                SELECT id FROM jobs WHERE id = ANY(ids) AND coalesce(state, '') = 'pending'
                ORDER BY id FOR UPDATE) AS s;
        ELSE
            -- not a gated job nor one past its deadline stored since the look above: the
            -- next call takes those by their rules
            walked := NULL;
            SELECT array_agg(s.id) INTO ids FROM (
                SELECT id FROM jobs WHERE state = 'pending' AND queue = q AND NOT gated
                  AND NOT lined AND (deadline IS NULL OR deadline >= v_now)
                ORDER BY ready_at, seq LIMIT need FOR UPDATE SKIP LOCKED) AS s;
        END IF;
        CONTINUE WHEN ids IS NULL OR cardinality(ids) = 0;
        WITH leased AS (
            UPDATE jobs SET state = 'active', attempt = attempt + 1, worker = p_worker,
                token = replace(gen_random_uuid()::text, '-', ''),
                lease_expires_at = v_now + p_lease, started_at = v_now,
                cancel_requested = false,
                events = events || CASE WHEN breaker_key IS NULL THEN ''
                                        ELSE breaker_probe_line(v_now, breaker_key) END
                    || event_line(v_now, 'started', 'active', NULL, p_worker, attempt + 1)
            WHERE id = ANY(ids)  -- locked above, still pending
            RETURNING id, name, queue, payload, token, attempt, errors, max_retries,
                      timeout, batch_id, recoveries, cost, breaker_key,
                      -- the walk's order, else the queue's
                      coalesce(array_position(walked, id), 0) AS walk, ready_at, seq
        )
        SELECT array_agg(id ORDER BY walk, ready_at, seq),
            array_agg(name ORDER BY walk, ready_at, seq),
            array_agg(queue ORDER BY walk, ready_at, seq),
            array_agg(payload ORDER BY walk, ready_at, seq),
            array_agg(token ORDER BY walk, ready_at, seq),
            array_agg(attempt ORDER BY walk, ready_at, seq),
            array_agg(errors ORDER BY walk, ready_at, seq),
            array_agg(max_retries ORDER BY walk, ready_at, seq),
            array_agg(timeout ORDER BY walk, ready_at, seq),
            array_agg(batch_id ORDER BY walk, ready_at, seq),
            array_agg(recoveries ORDER BY walk, ready_at, seq),
            array_agg(cost ORDER BY walk, ready_at, seq), sum(cost)::integer,
            array_agg(batch_id) FILTER (WHERE batch_id IS NOT NULL),
            array_agg(id) FILTER (WHERE breaker_key IS NOT NULL)
        INTO l_id, l_name, l_queue, l_payload, l_token, l_attempt, l_errors, l_max_retries,
             l_timeout, l_batch_id, l_recoveries, l_cost, l_spent, l_batches, l_breakers
        FROM leased;
        CONTINUE WHEN l_id IS NULL;
        IF l_breakers IS NOT NULL THEN  -- before the next queue's walk reads the breakers
            PERFORM breaker_probe(v_now, l_breakers);
        END IF;
        got := got + l_spent;
        o_id := o_id || l_id; o_name := o_name || l_name; o_queue := o_queue || l_queue;
        o_payload := o_payload || l_payload; o_token := o_token || l_token;
        o_attempt := o_attempt || l_attempt; o_errors := o_errors || l_errors;
        o_max_retries := o_max_retries || l_max_retries; o_timeout := o_timeout || l_timeout;
        o_batch_id := o_batch_id || l_batch_id; o_recoveries := o_recoveries || l_recoveries;
        o_cost := o_cost || l_cost;
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
        o_errors, o_max_retries, o_timeout, o_batch_id, o_recoveries, o_cost);
END
$$;
