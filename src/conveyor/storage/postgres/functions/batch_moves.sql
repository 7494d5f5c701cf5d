-- Batch counters: moves (batch, from state or NULL for a new job, to state or NULL for a
-- deleted one), applied per batch in id order (two transactions never wait on each other in
-- a circle), then completion and callbacks for every batch a move could complete or re-open.
-- Active counts as pending (`n_pending` holds both, `n_active` stays 0: readers count the
-- active jobs on jobs_batch, storage/postgres/batches.py), so a lease moves no counter: a
-- call of leases only sets started_at on a batch's first one. Any other call updates each
-- batch's row once and reads back from that UPDATE (the row locked) whether completion or a
-- callback could be due; settle_batch runs only then.
CREATE OR REPLACE FUNCTION batch_moves(p_now float8, p_batches text[], p_from text[], p_to text[])
RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT SET enable_seqscan = off AS $$
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
