-- A queue's lineup (docs/scheduling.md, storage/lineup.py): a job with a priority, aging, a
-- fair key or a cost above one is "lined" (1): it leaves jobs_ready, which keeps the jobs
-- started in arrival order exactly as before, for jobs_lineup, which the walk reads by
-- priority, then fair key, then arrival.
ALTER TABLE jobs ADD COLUMN lined INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;  -- now: raised by aging
ALTER TABLE jobs ADD COLUMN fair_key TEXT;
ALTER TABLE jobs ADD COLUMN cost INTEGER NOT NULL DEFAULT 1;
ALTER TABLE jobs ADD COLUMN aging REAL;       -- seconds per point of priority gained
ALTER TABLE jobs ADD COLUMN age_next REAL;    -- when aging raises it next
-- The fair key served last in the queue: the next round starts after it.
ALTER TABLE queues ADD COLUMN fair_pointer TEXT;

DROP INDEX jobs_ready;
CREATE INDEX jobs_ready ON jobs (queue, ready_at) WHERE state = 'pending' AND lined = 0;
CREATE INDEX jobs_lineup ON jobs (queue, priority, fair_key, ready_at)
    WHERE state = 'pending' AND lined = 1;
CREATE INDEX jobs_aging ON jobs (age_next) WHERE state = 'pending' AND age_next IS NOT NULL;
