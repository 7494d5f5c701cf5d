-- When a schedule was first saved: schedulers never enqueue a tick from before it, so a
-- schedule registered for the first time does not "catch up" ticks from before it existed.
-- NULL for schedules saved before this column existed (they did exist then).
ALTER TABLE schedules ADD COLUMN created_at REAL;
