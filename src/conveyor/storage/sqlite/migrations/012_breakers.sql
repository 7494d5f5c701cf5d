-- Circuit breakers (docs/operations.md, "Breakers"; storage/breakers.py): a job's breaker key,
-- and one row per key that is not closed and clean. A key without a row is closed.
ALTER TABLE jobs ADD COLUMN breaker_key TEXT;

CREATE TABLE breakers (
    key       TEXT PRIMARY KEY,
    state     TEXT NOT NULL,                -- closed, open, half_open
    failures  TEXT NOT NULL DEFAULT '[]',   -- JSON array: times of counted errors, oldest first
    within    REAL NOT NULL DEFAULT 0,      -- the window they count in
    opened_at REAL,
    probe_at  REAL,
    probe_id  TEXT,
    reason    TEXT,
    trips     INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
