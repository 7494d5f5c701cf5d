-- The overview's history (Inspector.history): outcomes per queue and minute (minutes since
-- the epoch), added to by the same statements as the other totals; trim() deletes the minutes
-- older than a day.
CREATE TABLE minute_totals (
    queue     TEXT NOT NULL,
    minute    INTEGER NOT NULL,
    processed INTEGER NOT NULL DEFAULT 0,
    failed    INTEGER NOT NULL DEFAULT 0,
    dead      INTEGER NOT NULL DEFAULT 0,
    retried   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, minute)
) WITHOUT ROWID;
