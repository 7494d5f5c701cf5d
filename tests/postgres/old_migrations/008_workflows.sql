-- Workflows (docs/workflows.md, storage/graph.py): a workflow is a batch of kind 'workflow'
-- whose jobs have a row in wf_nodes; a node with parents is stored 'waiting'.
ALTER TABLE batches ADD COLUMN n_waiting integer NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN kind text NOT NULL DEFAULT 'batch';
CREATE INDEX batches_kind ON batches (kind, created_at);
-- Counted per queue (Inspector.queues) over its own partial index, as every other state.
CREATE INDEX jobs_waiting ON jobs (queue) WHERE state = 'waiting';

CREATE TABLE wf_nodes (
    id        text PRIMARY KEY,   -- the job's id
    node      text NOT NULL,      -- Node.to_wire() as JSON: parents, children, policy, results
    unsettled integer NOT NULL,   -- parents not settled yet
    settled   text,               -- the state its children were settled with
    ended_by  text                -- 'fail' / 'skip' when the graph ended the job
);

-- Nodes to settle: a job of a workflow that entered or left a terminal state, or was deleted
-- unfinished. Written by the move itself (whichever function or statement made it), in its
-- transaction; graph.py settles them in the next one, and the poller sweeps what a crash left.
CREATE TABLE wf_marks (id text PRIMARY KEY);

CREATE FUNCTION wf_mark() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF EXISTS (SELECT 1 FROM wf_nodes WHERE id = OLD.id) THEN
            INSERT INTO wf_marks (id) VALUES (OLD.id) ON CONFLICT DO NOTHING;
        END IF;
        RETURN OLD;
    END IF;
    IF EXISTS (SELECT 1 FROM wf_nodes WHERE id = NEW.id) THEN
        INSERT INTO wf_marks (id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER wf_mark_move AFTER UPDATE OF state ON jobs FOR EACH ROW
    WHEN (NEW.batch_id IS NOT NULL
          AND (OLD.state IN ('succeeded', 'failed', 'dead', 'cancelled'))
              IS DISTINCT FROM (NEW.state IN ('succeeded', 'failed', 'dead', 'cancelled')))
    EXECUTE FUNCTION wf_mark();
CREATE TRIGGER wf_mark_delete AFTER DELETE ON jobs FOR EACH ROW
    WHEN (OLD.batch_id IS NOT NULL
          AND OLD.state NOT IN ('succeeded', 'failed', 'dead', 'cancelled'))
    EXECUTE FUNCTION wf_mark();

-- Whether marks wait: VOLATILE, so it sees what the statement calling it wrote before
-- (``SELECT ack(...), wf_pending()`` tells in the ack's own round trip).
CREATE FUNCTION wf_pending() RETURNS boolean LANGUAGE sql VOLATILE
SET search_path FROM CURRENT AS $$ SELECT EXISTS (SELECT 1 FROM wf_marks) $$;

-- batch_moves as in version 5, with the waiting counter.
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
        IF d.total <> 0 OR d.scheduled <> 0 OR d.waiting <> 0 OR d.pending <> 0
                OR d.retrying <> 0 OR d.succeeded <> 0 OR d.failed <> 0 OR d.dead <> 0
                OR d.cancelled <> 0 THEN
            -- settle_batch acts only on a batch that is complete, was complete (re-opened),
            -- or has a dead job and callbacks: read off the row this UPDATE locked
            UPDATE batches SET total = total + d.total, n_scheduled = n_scheduled + d.scheduled,
                n_waiting = n_waiting + d.waiting,
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
