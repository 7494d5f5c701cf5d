-- Workflows (docs/workflows.md, storage/graph.py): a workflow is a batch of kind 'workflow'
-- whose jobs have a row in wf_nodes; a node with parents is stored 'waiting'.
ALTER TABLE batches ADD COLUMN n_waiting INTEGER NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN kind TEXT NOT NULL DEFAULT 'batch';
CREATE INDEX batches_kind ON batches (kind, created_at);

CREATE TABLE wf_nodes (
    id        TEXT PRIMARY KEY,   -- the job's id
    node      TEXT NOT NULL,      -- Node.to_wire(): parents, children, policy, results
    unsettled INTEGER NOT NULL,   -- parents not settled yet
    settled   TEXT,               -- the state its children were settled with
    ended_by  TEXT                -- 'fail' / 'skip' when the graph ended the job
) WITHOUT ROWID;

-- Nodes to settle: a job of a workflow that entered or left a terminal state, or was deleted
-- unfinished. Written by the move itself, so no code path can move a node without its mark;
-- the same transaction settles them (batches.apply -> graph.settle).
CREATE TABLE wf_marks (id TEXT PRIMARY KEY) WITHOUT ROWID;

CREATE TRIGGER wf_mark_move AFTER UPDATE OF state ON jobs
WHEN NEW.batch_id IS NOT NULL
 AND (OLD.state IN ('succeeded', 'failed', 'dead', 'cancelled'))
     <> (NEW.state IN ('succeeded', 'failed', 'dead', 'cancelled'))
 AND EXISTS (SELECT 1 FROM wf_nodes WHERE id = NEW.id)
BEGIN
    INSERT OR IGNORE INTO wf_marks (id) VALUES (NEW.id);
END;

CREATE TRIGGER wf_mark_delete AFTER DELETE ON jobs
WHEN OLD.batch_id IS NOT NULL
 AND OLD.state NOT IN ('succeeded', 'failed', 'dead', 'cancelled')
 AND EXISTS (SELECT 1 FROM wf_nodes WHERE id = OLD.id)
BEGIN
    INSERT OR IGNORE INTO wf_marks (id) VALUES (OLD.id);
END;
