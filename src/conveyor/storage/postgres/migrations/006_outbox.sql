-- The store as a broker's outbox (docs/design.md §7, storage/postgres/outbox.py). When a
-- pending job is next due to be published: NULL = now (every job, and every job that comes
-- back to pending after a start); a time = handed to a relay, due again then if still not
-- started; negative = parked by flow control or a paused queue, due when it may run. No index:
-- publish_due walks jobs_ready in dequeue's order and skips the few jobs in the broker. Nothing
-- on the path without a broker reads or writes the column.
ALTER TABLE jobs ADD COLUMN publish_at float8;
-- Its functions: ../functions/flow_admits.sql, publish_due.sql, start.sql, bury.sql.
