-- The overview's history (Inspector.history): outcomes per queue and minute (minutes since
-- the epoch), added by add_totals in the same statement as the all-time totals; trim()
-- deletes minutes older than a day. "Today" is read from it too, so daily_totals goes and an
-- ack writes as many rows as before (an upgrade counts today from the upgrade on).
CREATE TABLE minute_totals (
    queue     text NOT NULL,
    minute    bigint NOT NULL,
    processed bigint NOT NULL DEFAULT 0,
    failed    bigint NOT NULL DEFAULT 0,
    dead      bigint NOT NULL DEFAULT 0,
    retried   bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, minute)
);

DROP TABLE daily_totals;
-- add_totals writes the minutes: ../functions/add_totals.sql.
