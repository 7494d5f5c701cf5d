-- The overview's history (Inspector.history): outcomes per queue and minute (minutes since
-- the epoch), added to by the statements that add the all-time totals; trim() deletes the
-- minutes older than a day. "Today" is read from it too, so daily_totals goes (an upgrade
-- counts today from the upgrade on).
CREATE TABLE minute_totals (
    queue     TEXT NOT NULL,
    minute    INTEGER NOT NULL,
    processed INTEGER NOT NULL DEFAULT 0,
    failed    INTEGER NOT NULL DEFAULT 0,
    dead      INTEGER NOT NULL DEFAULT 0,
    retried   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, minute)
) WITHOUT ROWID;

DROP TABLE daily_totals;
