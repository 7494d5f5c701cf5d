-- The overview's history (Inspector.history): outcomes per queue and minute (minutes since
-- the epoch), added by add_totals in the same statement as the all-time totals; trim()
-- deletes minutes older than a day. "Today" is read from it too, so daily_totals goes and an
-- ack writes as many rows as before (an upgrade counts today from the upgrade on).
CREATE TABLE minute_totals (
    queue     text NOT NULL,
    minute    bigint NOT NULL,
    processed bigint NOT NULL DEFAULT 0,
    failed    bigint NOT NULL DEFAULT 0,
    dead      bigint NOT NULL DEFAULT 0,
    retried   bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, minute)
);

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

DROP TABLE daily_totals;
