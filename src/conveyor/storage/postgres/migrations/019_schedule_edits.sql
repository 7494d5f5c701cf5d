-- conveyor PostgreSQL schema, version 19: schedules at run time (docs/operations.md,
-- "Schedules at run time"). Tables only, no function: every change is a plain transaction
-- (storage/postgres/schedules.py), under a transaction advisory lock of the schedule's name.
--
-- * A schedule's arguments, where it came from ('code': @app.periodic, 'runtime': added by an
--   operator), the code's definition while an operator's edit overrides it (JSON text, NULL
--   when none does) and when the definition last changed (no tick from before it).
-- * schedule_changes: the audit trail, written in the change's own transaction; the newest
--   1,000 are kept.

ALTER TABLE schedules
    ADD COLUMN args       text NOT NULL DEFAULT '[]',
    ADD COLUMN kwargs     text NOT NULL DEFAULT '{}',
    ADD COLUMN origin     text NOT NULL DEFAULT 'code',
    ADD COLUMN declared   text,
    ADD COLUMN changed_at double precision;

CREATE TABLE schedule_changes (
    seq    bigserial PRIMARY KEY,
    at     double precision NOT NULL,
    name   text NOT NULL,
    action text NOT NULL,
    changed_by text NOT NULL,
    detail text NOT NULL
);
