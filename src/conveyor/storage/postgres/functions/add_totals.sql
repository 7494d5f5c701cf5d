-- Outcome totals: one row per counted outcome (processed, failed, dead, retried), added up
-- per (queue, name) for all time and per (queue, minute) for the overview's history
-- (Inspector.history; trim() deletes minutes older than a day), both in one statement, rows
-- in key order. ack adds its totals itself, the same way; recover and bury call this.
CREATE OR REPLACE FUNCTION add_totals(p_now float8, p_queues text[], p_names text[], p_kinds text[])
RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT SET enable_seqscan = off AS $$
BEGIN
    WITH all_time AS (
    INSERT INTO job_totals AS t (queue, name, processed, failed, dead, retried)
    SELECT q, n, count(*) FILTER (WHERE k = 'processed'), count(*) FILTER (WHERE k = 'failed'),
           count(*) FILTER (WHERE k = 'dead'), count(*) FILTER (WHERE k = 'retried')
    FROM unnest(p_queues, p_names, p_kinds) AS u(q, n, k) WHERE k IS NOT NULL
    GROUP BY q, n ORDER BY q, n
    ON CONFLICT (queue, name) DO UPDATE SET processed = t.processed + excluded.processed,
        failed = t.failed + excluded.failed, dead = t.dead + excluded.dead,
        retried = t.retried + excluded.retried
    )
    INSERT INTO minute_totals AS m (queue, minute, processed, failed, dead, retried)
    SELECT q, floor(p_now / 60)::bigint,
           count(*) FILTER (WHERE k = 'processed'), count(*) FILTER (WHERE k = 'failed'),
           count(*) FILTER (WHERE k = 'dead'), count(*) FILTER (WHERE k = 'retried')
    FROM unnest(p_queues, p_kinds) AS u(q, k) WHERE k IS NOT NULL
    GROUP BY q ORDER BY q
    ON CONFLICT (queue, minute) DO UPDATE SET processed = m.processed + excluded.processed,
        failed = m.failed + excluded.failed, dead = m.dead + excluded.dead,
        retried = m.retried + excluded.retried;
END
$$;
