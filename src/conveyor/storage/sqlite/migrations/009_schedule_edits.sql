-- Schedules at run time (docs/operations.md): a schedule's arguments, where it came from
-- ('code': @app.periodic, 'runtime': added by an operator), the code's definition while an
-- operator's edit overrides it (JSON, NULL when none does) and when the definition last
-- changed (no tick from before it is enqueued).
ALTER TABLE schedules ADD COLUMN args TEXT NOT NULL DEFAULT '[]';
ALTER TABLE schedules ADD COLUMN kwargs TEXT NOT NULL DEFAULT '{}';
ALTER TABLE schedules ADD COLUMN origin TEXT NOT NULL DEFAULT 'code';
ALTER TABLE schedules ADD COLUMN declared TEXT;
ALTER TABLE schedules ADD COLUMN changed_at REAL;

-- The audit trail of schedule changes, written in the change's own transaction; the newest
-- 1,000 are kept.
CREATE TABLE schedule_changes (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    at     REAL NOT NULL,
    name   TEXT NOT NULL,
    action TEXT NOT NULL,
    changed_by TEXT NOT NULL,
    detail TEXT NOT NULL
);
