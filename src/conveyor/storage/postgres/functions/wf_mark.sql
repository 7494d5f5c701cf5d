-- Workflows (docs/workflows.md, storage/graph.py): a node to settle is marked in wf_marks
-- when a job of a workflow enters or leaves a terminal state, or is deleted unfinished.
-- Written by the move itself (whichever function or statement made it), in its transaction;
-- postgres/graph.py settles the marks in the next one, and the poller sweeps what a crash
-- left. The triggers fire only for a workflow's own jobs: their WHEN clauses test the row's
-- `wf` flag (set as the node's row is written), which costs nothing per row of a plain batch.
CREATE OR REPLACE FUNCTION wf_mark() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
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
DROP TRIGGER IF EXISTS wf_mark_move ON jobs;
CREATE TRIGGER wf_mark_move AFTER UPDATE OF state ON jobs FOR EACH ROW
    WHEN (NEW.wf AND NEW.batch_id IS NOT NULL
          AND (OLD.state IN ('succeeded', 'failed', 'dead', 'cancelled'))
              IS DISTINCT FROM (NEW.state IN ('succeeded', 'failed', 'dead', 'cancelled')))
    EXECUTE FUNCTION wf_mark();
DROP TRIGGER IF EXISTS wf_mark_delete ON jobs;
CREATE TRIGGER wf_mark_delete AFTER DELETE ON jobs FOR EACH ROW
    WHEN (OLD.wf AND OLD.batch_id IS NOT NULL
          AND OLD.state NOT IN ('succeeded', 'failed', 'dead', 'cancelled'))
    EXECUTE FUNCTION wf_mark();
