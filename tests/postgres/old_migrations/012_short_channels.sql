-- Channels named to fit: a NOTIFY channel has 63 bytes at most and the schema's name up to 51,
-- so each channel is 'conveyor_' plus at most two letters plus the schema.
--
-- Result waiters (version 10) were woken on 'conveyor_done_<schema>': past a 49-letter schema
-- that name was too long, and pg_notify failed the ack of every job someone awaited. They
-- are woken on 'conveyor_d_<schema>' now (storage/postgres/aio.py listens there).
CREATE OR REPLACE FUNCTION wake_waiters() RETURNS boolean LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT AS $$
DECLARE
    v_id text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM result_waiters) THEN
        RETURN false;
    END IF;
    FOR v_id IN
        SELECT w.job_id FROM result_waiters w JOIN jobs j ON j.id = w.job_id
        WHERE j.state IN ('succeeded', 'failed', 'dead', 'cancelled')
    LOOP
        PERFORM pg_notify('conveyor_d_' || current_schema(), v_id);
    END LOOP;
    RETURN true;
END
$$;

-- Waiting for a batch (Batch.wait, app.wait_batch, Workflow.wait; storage/batch_wait.py): the
-- moment a batch finishes, whichever function set its finished_at, 'conveyor_b_<schema>' is
-- notified with its id. The WHEN clause keeps the counter updates of every ack free of a call.
CREATE FUNCTION notify_batch_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('conveyor_b_' || TG_TABLE_SCHEMA, NEW.id);
    RETURN NULL;
END
$$;
CREATE TRIGGER batches_finished AFTER UPDATE OF finished_at ON batches FOR EACH ROW
    WHEN (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION notify_batch_finished();
