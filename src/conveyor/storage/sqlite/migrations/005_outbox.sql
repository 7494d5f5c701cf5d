-- The store as a broker's outbox (docs/design.md §7, storage/sqlite/outbox.py). When a pending
-- job is next due to be published: NULL = now (every job, and every job that comes back to
-- pending after a start); a time = handed to a relay, due again then if still not started;
-- negative = parked by flow control or a paused queue, due when it may run. No index: the
-- relay walks ``jobs_ready`` in dequeue's order and skips the few jobs in the broker.
ALTER TABLE jobs ADD COLUMN publish_at REAL;
