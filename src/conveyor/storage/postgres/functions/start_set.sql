-- start's deliveries when not every one is plain: the plain ones (each job's first mention,
-- pending, of this queue, ungated, in time, in a queue not paused) are locked in id order and
-- leased by one UPDATE, as dequeue leases; a second mention of a job leased here replies
-- 'running'; everything else goes, in its order, to start_each. Replies come back one per
-- delivery, in the deliveries' order.
CREATE OR REPLACE FUNCTION start_set(
    p_now float8, p_queue text, p_ids text[], p_redelivered boolean[], p_messages text[],
    p_worker text, p_lease float8, p_max integer, p_why text, p_cancelled text)
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
