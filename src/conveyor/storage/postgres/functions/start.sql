-- Lease delivered jobs of one queue (p_ids, with the broker's redelivered flags and message
-- ids), one reply per delivery in order: kind 'started' (with the leased job's columns, as
-- dequeue returns them), 'running', 'skipped', 'parked' or 'foreign' (start_each says when).
-- One statement locks the call's plain deliveries (pending, of this queue, ungated, in time,
-- in a queue not paused) in id order. When that is every delivery, each named once (the
-- usual call), the next statement leases them, marks the batches they start (rows locked in
-- id order, as dequeue marks them) and returns the replies in the deliveries' order. Any
-- other call goes on through start_set, which locks the same rows again (already held).
-- A job leased here gets a token ending in '#' and its message's id (start_each reads it).
CREATE OR REPLACE FUNCTION start(
    p_now float8, p_queue text, p_ids text[], p_redelivered boolean[], p_messages text[],
    p_worker text, p_lease float8, p_max integer, p_why text, p_cancelled text)
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

-- The signature without message ids, for a worker of an older release still running during
-- an upgrade: its messages have no ids, so a redelivery takes over an active job as before.
-- (LANGUAGE sql: checked against the function above, which it calls, when it is created.)
CREATE OR REPLACE FUNCTION start(
    p_now float8, p_queue text, p_ids text[], p_redelivered boolean[], p_worker text,
    p_lease float8, p_max integer, p_why text, p_cancelled text)
RETURNS TABLE (kind text, id text, name text, queue text, payload text, token text,
               attempt integer, errors integer, max_retries integer, timeout float8,
               batch_id text, recoveries integer)
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT * FROM start(p_now, p_queue, p_ids, p_redelivered,
                        array_fill(NULL::text, ARRAY[coalesce(cardinality(p_ids), 0)]),
                        p_worker, p_lease, p_max, p_why, p_cancelled)
$$;
