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
-- promote leaves members to postgres/groups.py; batch_moves counts them
-- (../functions/promote.sql, batch_moves.sql).
