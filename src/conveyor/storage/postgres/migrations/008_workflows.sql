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
-- The triggers that write the marks and wf_pending(): ../functions/wf_mark.sql, wf_pending.sql.
