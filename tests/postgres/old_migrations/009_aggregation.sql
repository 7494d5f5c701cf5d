-- Aggregation groups (docs/aggregation.md, storage/aggregation.py): a member waits in state
-- 'aggregating' with its group's key, ready_at = when it arrived; a group's summary is a row
-- of agg_groups, found by the poller through its flush time. Every change to a group is made
-- under the transaction advisory lock of its (queue, name, key) (postgres/groups.py).
ALTER TABLE jobs ADD COLUMN group_key text;
ALTER TABLE batches ADD COLUMN n_aggregating integer NOT NULL DEFAULT 0;
-- A group's members oldest first; also what Inspector.queues counts per queue.
CREATE INDEX jobs_aggregating ON jobs (queue, name, group_key, ready_at, id)
    WHERE state = 'aggregating';
-- Due members (scheduled or retrying) go back into their group from Python, not promote().
CREATE INDEX jobs_due_members ON jobs (run_at)
    WHERE state IN ('scheduled', 'retrying') AND group_key IS NOT NULL;

CREATE TABLE agg_groups (
    queue     text NOT NULL,
    name      text NOT NULL,
    key       text NOT NULL,
    first_at  float8 NOT NULL,
    last_at   float8 NOT NULL,
    size      integer NOT NULL,
    flush_at  float8 NOT NULL,
    lead      text,
    grace     float8 NOT NULL,
    max_delay float8 NOT NULL,
    max_size  integer NOT NULL,
    PRIMARY KEY (queue, name, key)
);
CREATE INDEX agg_groups_due ON agg_groups (flush_at);

-- promote as in version 2, leaving members (group_key set) to postgres/groups.py.
CREATE OR REPLACE FUNCTION promote(p_now float8, p_limit integer) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT
    SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
DECLARE
    v_now float8 := clock_now(p_now);
    moved integer;
    b_ids text[];
    b_from text[];
BEGIN
    WITH due AS (
        SELECT id, state FROM jobs WHERE state IN ('scheduled', 'retrying') AND run_at <= v_now
            AND group_key IS NULL
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

-- batch_moves as in version 8, with the aggregating counter.
CREATE OR REPLACE FUNCTION batch_moves(p_now float8, p_batches text[], p_from text[], p_to text[])
RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    d record;
    v_b text;
    v_settle boolean;
BEGIN
    IF p_from <@ ARRAY['pending'] AND p_to <@ ARRAY['active'] THEN  -- leases only (no NULLs)
        FOR v_b IN SELECT DISTINCT b FROM unnest(p_batches) AS b WHERE b IS NOT NULL ORDER BY b
        LOOP
            UPDATE batches SET started_at = p_now WHERE id = v_b AND started_at IS NULL;
        END LOOP;
        RETURN;
    END IF;
    FOR d IN
        SELECT b,
            count(*) FILTER (WHERE f IS NULL) - count(*) FILTER (WHERE t IS NULL) AS total,
            count(*) FILTER (WHERE t = 'scheduled') - count(*) FILTER (WHERE f = 'scheduled') AS scheduled,
            count(*) FILTER (WHERE t = 'waiting') - count(*) FILTER (WHERE f = 'waiting') AS waiting,
            count(*) FILTER (WHERE t = 'aggregating') - count(*) FILTER (WHERE f = 'aggregating') AS aggregating,
            count(*) FILTER (WHERE t = 'pending') - count(*) FILTER (WHERE f = 'pending') AS pending,
            count(*) FILTER (WHERE t = 'retrying') - count(*) FILTER (WHERE f = 'retrying') AS retrying,
            count(*) FILTER (WHERE t = 'succeeded') - count(*) FILTER (WHERE f = 'succeeded') AS succeeded,
            count(*) FILTER (WHERE t = 'failed') - count(*) FILTER (WHERE f = 'failed') AS failed,
            count(*) FILTER (WHERE t = 'dead') - count(*) FILTER (WHERE f = 'dead') AS dead,
            count(*) FILTER (WHERE t = 'cancelled') - count(*) FILTER (WHERE f = 'cancelled') AS cancelled,
            bool_or(f IS NULL OR t IS NULL
                    OR f IN ('succeeded', 'failed', 'dead', 'cancelled')
                    OR t IN ('succeeded', 'failed', 'dead', 'cancelled')) AS settles,
            bool_or(starts) AS starts
        FROM (SELECT u.b, CASE WHEN u.f = 'active' THEN 'pending' ELSE u.f END AS f,
                     CASE WHEN u.t = 'active' THEN 'pending' ELSE u.t END AS t,
                     u.t = 'active' AS starts
              FROM unnest(p_batches, p_from, p_to) AS u(b, f, t)) AS m
        WHERE b IS NOT NULL GROUP BY b ORDER BY b
    LOOP
        v_settle := true;
        IF d.total <> 0 OR d.scheduled <> 0 OR d.waiting <> 0 OR d.aggregating <> 0
                OR d.pending <> 0
                OR d.retrying <> 0 OR d.succeeded <> 0 OR d.failed <> 0 OR d.dead <> 0
                OR d.cancelled <> 0 THEN
            -- settle_batch acts only on a batch that is complete, was complete (re-opened),
            -- or has a dead job and callbacks: read off the row this UPDATE locked
            UPDATE batches SET total = total + d.total, n_scheduled = n_scheduled + d.scheduled,
                n_waiting = n_waiting + d.waiting, n_aggregating = n_aggregating + d.aggregating,
                n_pending = n_pending + d.pending,
                n_retrying = n_retrying + d.retrying, n_succeeded = n_succeeded + d.succeeded,
                n_failed = n_failed + d.failed, n_dead = n_dead + d.dead,
                n_cancelled = n_cancelled + d.cancelled,
                started_at = CASE WHEN d.starts THEN coalesce(started_at, p_now)
                                  ELSE started_at END
            WHERE id = d.b
            RETURNING (closed AND n_succeeded + n_failed + n_dead + n_cancelled >= total)
                      OR finished_at IS NOT NULL
                      OR (n_dead > 0 AND callbacks NOT IN ('', '{}'))
            INTO v_settle;
            v_settle := coalesce(v_settle, false);  -- no row: trimmed away, nothing to settle
        ELSIF d.starts THEN
            UPDATE batches SET started_at = p_now WHERE id = d.b AND started_at IS NULL;
        END IF;
        IF d.settles AND v_settle THEN
            PERFORM settle_batch(p_now, d.b);
        END IF;
    END LOOP;
END
$$;

-- As every hot-path function since version 5 (005_plans.sql): index plans, never a scan.
ALTER FUNCTION batch_moves(float8, text[], text[], text[]) SET enable_seqscan = off;
