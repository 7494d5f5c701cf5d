-- When an operator last resumed a paused schedule: schedulers never enqueue a tick that fell
-- before it, so a worker starting soon after a resume does not catch up the paused period.
ALTER TABLE schedules ADD COLUMN resumed_at REAL;
