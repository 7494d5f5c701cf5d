-- conveyor PostgreSQL schema, version 15: only a workflow's own jobs call the mark trigger.
--
-- Every job is kept; jobs gain one column, `wf` (added with a constant default: no rewrite).
--
-- wf_mark_move (version 8) called a PL/pgSQL function, which looked the job up in wf_nodes,
-- each time any batch's job entered or left a finished state: once per job of every plain
-- batch, where no job is a workflow's node. In a 5,000-job batch that was 5,000 calls and
-- lookups inside the acks, 5% of the batch's time on PostgreSQL (benchmarks/pg_batch_probe,
-- the trigger dropped: 0.81 -> 0.77 s, server CPU 0.95 -> 0.90 s, medians of 8 rounds). The
-- job's row now says whether it is a node (`wf`, set by postgres/graph.py in the enqueue's
-- transaction, as it writes the node's row), and the triggers' WHEN clauses test it, which
-- costs nothing per row (../functions/wf_mark.sql). The nodes stored before this version
-- are marked here.

ALTER TABLE jobs ADD COLUMN wf boolean NOT NULL DEFAULT false;
UPDATE jobs SET wf = true WHERE id IN (SELECT id FROM wf_nodes);
