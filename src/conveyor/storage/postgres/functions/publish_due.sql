-- The store as a broker's outbox: up to p_count pending jobs of p_queue due to be published
-- (publish_at NULL, or past, or parked and now admitted by flow control), oldest first,
-- stamped due again p_after seconds from now, picked, locked and stamped by one statement;
-- rows another relay holds are skipped, and a paused queue publishes nothing. The plain jobs
-- first (jobs_ready), then, while there is room, the lined ones (line_job.sql) in
-- jobs_lineup's order: priority, fair key, arrival (the broker orders the deliveries).
CREATE OR REPLACE FUNCTION publish_due(p_now float8, p_queue text, p_count integer,
                                       p_after float8)
RETURNS text[]
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
DECLARE
    v_now float8 := clock_now(p_now);
    ids text[];
    more text[];
BEGIN
    WITH due AS (
        SELECT id, ready_at, seq FROM jobs WHERE state = 'pending' AND NOT lined
            AND queue = p_queue
            AND NOT coalesce((SELECT paused FROM queues WHERE name = p_queue), false)
            AND (publish_at IS NULL OR publish_at BETWEEN 0 AND v_now
                 OR (publish_at < 0 AND flow_admits(v_now, id, false)))
        ORDER BY ready_at, seq LIMIT p_count FOR UPDATE SKIP LOCKED
    ), stamped AS (
        UPDATE jobs SET publish_at = v_now + p_after FROM due WHERE jobs.id = due.id
        RETURNING due.id, due.ready_at, due.seq
    )
    SELECT array_agg(s.id ORDER BY s.ready_at, s.seq) INTO ids FROM stamped s;
    IF coalesce(cardinality(ids), 0) < p_count THEN
        WITH due AS (
            SELECT id, priority, fair_key, ready_at, seq FROM jobs
            WHERE state = 'pending' AND lined AND queue = p_queue
                AND NOT coalesce((SELECT paused FROM queues WHERE name = p_queue), false)
                AND (publish_at IS NULL OR publish_at BETWEEN 0 AND v_now
                     OR (publish_at < 0 AND flow_admits(v_now, id, false)))
            ORDER BY priority, fair_key, ready_at, seq
            LIMIT p_count - coalesce(cardinality(ids), 0) FOR UPDATE SKIP LOCKED
        ), stamped AS (
            UPDATE jobs SET publish_at = v_now + p_after FROM due WHERE jobs.id = due.id
            RETURNING due.id, due.priority, due.fair_key, due.ready_at, due.seq
        )
        SELECT array_agg(s.id ORDER BY s.priority, s.fair_key, s.ready_at, s.seq) INTO more
        FROM stamped s;
        ids := coalesce(ids, '{}') || coalesce(more, '{}');
    END IF;
    RETURN coalesce(ids, '{}');
END
$$;
