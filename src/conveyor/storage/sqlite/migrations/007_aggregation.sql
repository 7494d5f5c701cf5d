-- Aggregation groups (docs/aggregation.md, storage/aggregation.py): a member waits in state
-- 'aggregating' with its group's key, ready_at = when it arrived; a group's summary is a row
-- of agg_groups, found by the poller through its flush time.
ALTER TABLE jobs ADD COLUMN group_key TEXT;
ALTER TABLE batches ADD COLUMN n_aggregating INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_aggregating ON jobs (queue, name, group_key, ready_at, id)
    WHERE state = 'aggregating';

CREATE TABLE agg_groups (
    queue     TEXT NOT NULL,
    name      TEXT NOT NULL,
    key       TEXT NOT NULL,
    first_at  REAL NOT NULL,
    last_at   REAL NOT NULL,
    size      INTEGER NOT NULL,
    flush_at  REAL NOT NULL,
    lead      TEXT,
    grace     REAL NOT NULL,
    max_delay REAL NOT NULL,
    max_size  INTEGER NOT NULL,
    PRIMARY KEY (queue, name, key)
) WITHOUT ROWID;
CREATE INDEX agg_groups_due ON agg_groups (flush_at);
