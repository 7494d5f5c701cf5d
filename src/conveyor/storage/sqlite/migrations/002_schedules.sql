-- Periodic schedules: written by workers at start (definition), by operators (paused) and by
-- the worker that enqueued a tick (last_tick).
CREATE TABLE schedules (
    name      TEXT PRIMARY KEY,
    cron      TEXT NOT NULL,
    tz        TEXT NOT NULL,
    job_name  TEXT NOT NULL,
    queue     TEXT NOT NULL,
    paused    INTEGER NOT NULL DEFAULT 0,
    last_tick REAL
) WITHOUT ROWID;
