-- Callers waiting on a job's result (JobRef.aresult; postgres/aio.py): a row per waiting
-- call while it waits. The ack statement calls wake_waiters(): when nobody waits, one look
-- at an empty table; else a NOTIFY on 'conveyor_done_<schema>' (payload: the job id) for
-- each waited-on job that has ended (a waiter deletes its row once woken).
CREATE TABLE result_waiters (job_id text NOT NULL, since float8 NOT NULL);
CREATE INDEX result_waiters_job ON result_waiters (job_id);
-- The call that wakes them: ../functions/wake_waiters.sql.
