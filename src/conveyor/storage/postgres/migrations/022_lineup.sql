-- conveyor PostgreSQL schema, version 22: a queue's lineup (docs/scheduling.md,
-- storage/lineup.py): priority, fair turns between keys, cost.
--
-- A job stored with a priority, aging, a fair key or a cost above one is "lined" (and gated,
-- so dequeue's one look at jobs_ready_gated sends its queue the long way): the trigger of
-- ../functions/line_job.sql fills these columns from the job's flow settings. jobs_ready
-- keeps the other pending jobs in arrival order exactly as before (its predicate leaves the
-- lined ones out), jobs_lineup holds the lined ones by priority, fair key (byte order), then
-- arrival. A queue's pointer is the fair key served last there: the next round starts after
-- it. dequeue and dequeue_each take the worker's capacity and return each job's cost, so
-- their old argument lists are dropped (../functions/dequeue.sql, dequeue_each.sql).

ALTER TABLE jobs ADD COLUMN lined boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN priority integer NOT NULL DEFAULT 0;  -- now: raised by aging
ALTER TABLE jobs ADD COLUMN fair_key text COLLATE "C";
ALTER TABLE jobs ADD COLUMN cost integer NOT NULL DEFAULT 1;
ALTER TABLE jobs ADD COLUMN aging float8;     -- seconds per point of priority gained
ALTER TABLE jobs ADD COLUMN age_next float8;  -- when aging raises it next
ALTER TABLE queues ADD COLUMN fair_pointer text COLLATE "C";

DROP INDEX jobs_ready;
CREATE INDEX jobs_ready ON jobs (queue, ready_at, seq) WHERE state = 'pending' AND NOT lined;
CREATE INDEX jobs_lineup ON jobs (queue, priority, fair_key, ready_at, seq)
    WHERE state = 'pending' AND lined;
CREATE INDEX jobs_aging ON jobs (age_next) WHERE state = 'pending' AND age_next IS NOT NULL;

DROP FUNCTION IF EXISTS dequeue(float8, text[], text, integer, float8);
DROP FUNCTION IF EXISTS dequeue_each(float8, text[], text, integer, float8);
