-- conveyor PostgreSQL schema, version 23: breakers (issue 56, docs/flow-control.md
-- "Breakers"). A job stored with a breaker key holds it in jobs.breaker_key and is gated (the
-- trigger of ../functions/breaker.sql fills both from its flow settings), so that only the
-- gated paths lease it: dequeue_each's walk (gate_check.sql) and start_each (flow_admits.sql),
-- which skip it while its breaker is open. A key's state is one row of `breakers`, written
-- by the ack that counts an error (or a RetryAfter) and by the lease that starts the probe;
-- a key without a row is closed, and a closed key whose failure log is empty has none.
-- The gates take the breaker key as an argument and the key rule covers it, so the old
-- argument lists of gate_check, gate_take and broken_key are dropped.

ALTER TABLE jobs ADD COLUMN breaker_key text;

CREATE TABLE breakers (
    key        text PRIMARY KEY,
    state      text NOT NULL DEFAULT 'closed',   -- closed, open or half_open
    failures   float8[] NOT NULL DEFAULT '{}',   -- counted errors' times (a sliding log)
    within     float8 NOT NULL DEFAULT 0,        -- the window, as the last ack carried it
    opened_at  float8,
    probe_at   float8,
    probe_id   text,
    reason     text,
    trips      integer NOT NULL DEFAULT 0
);

DROP FUNCTION IF EXISTS gate_check(float8, text, text, integer, text, text, integer, float8,
                                   integer, jsonb);
DROP FUNCTION IF EXISTS gate_take(float8, text, text, text, integer, jsonb);
DROP FUNCTION IF EXISTS broken_key(text, text, text);
