-- Dequeue: lease up to `p_count` pending jobs, queue by queue in the order given; rows come
-- back in queue order, (ready_at, seq) within a queue. A call whose queues hold no job past
-- its deadline and no flow-controlled job (one look at two partial indexes for all of them)
-- locks each queue's oldest jobs FOR UPDATE SKIP LOCKED (many workers lease from one queue
-- without waiting on each other), skipping a paused queue and any gated or expired job stored
-- since that look, then leases them all and marks the batches they start with one statement.
-- Any other call goes to dequeue_each (a lined job, line_job.sql, is gated too). A job taken
-- here costs 1: p_count jobs fill p_count slots (p_capacity matters to lined jobs alone).
CREATE OR REPLACE FUNCTION dequeue(p_now float8, p_queues text[], p_worker text, p_count integer,
                                   p_lease float8, p_capacity integer)
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
    need integer := p_count;
    ids text[];
    all_ids text[] := '{}';
BEGIN
    IF EXISTS (SELECT 1 FROM jobs WHERE state = 'pending' AND queue = ANY(p_queues)
               AND deadline IS NOT NULL AND deadline < v_now)
       OR EXISTS (SELECT 1 FROM jobs WHERE state = 'pending' AND gated
                  AND queue = ANY(p_queues)) THEN
        RETURN QUERY SELECT * FROM dequeue_each(v_now, p_queues, p_worker, p_count, p_lease,
                                                p_capacity);
        RETURN;
    END IF;
    FOREACH q IN ARRAY p_queues LOOP
        CONTINUE WHEN q = ANY(seen);
        seen := seen || q;
        EXIT WHEN need <= 0;
        SELECT array_agg(s.id) INTO ids FROM (
            SELECT id FROM jobs
            WHERE state = 'pending' AND queue = q AND NOT gated AND NOT lined
              AND (deadline IS NULL OR deadline >= v_now)
              AND NOT coalesce((SELECT paused FROM queues WHERE name = q), false)
            ORDER BY ready_at, seq LIMIT need FOR UPDATE SKIP LOCKED) AS s;
        CONTINUE WHEN ids IS NULL;
        all_ids := all_ids || ids;
        need := need - cardinality(ids);
    END LOOP;
    IF cardinality(all_ids) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH leased AS (
        UPDATE jobs SET state = 'active', attempt = attempt + 1, worker = p_worker,
            token = replace(gen_random_uuid()::text, '-', ''),
            lease_expires_at = v_now + p_lease, started_at = v_now,
            cancel_requested = false,
            events = events || event_line(v_now, 'started', 'active', NULL, p_worker,
                                          attempt + 1)
        WHERE id = ANY(all_ids)  -- locked above, still pending
        RETURNING id, name, queue, payload, token, attempt, errors, max_retries,
                  timeout, batch_id, recoveries, ready_at, seq
    ), starts AS (  -- a batch's first lease sets its started_at; rows locked in id order
        SELECT b.id FROM batches b
        WHERE b.id IN (SELECT l.batch_id FROM leased l) AND b.started_at IS NULL
        ORDER BY b.id FOR UPDATE
    ), started AS (
        UPDATE batches SET started_at = v_now FROM starts
        WHERE batches.id = starts.id AND batches.started_at IS NULL
    )
    SELECT l.id, l.name, l.queue, l.payload, l.token, l.attempt, l.errors, l.max_retries,
           l.timeout, l.batch_id, l.recoveries, 1
    FROM leased l ORDER BY array_position(p_queues, l.queue), l.ready_at, l.seq;
END
$$;
