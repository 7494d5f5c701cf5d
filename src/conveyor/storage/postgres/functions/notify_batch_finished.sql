-- Waiting for a batch (Batch.wait, app.wait_batch, Workflow.wait; storage/batch_wait.py): the
-- moment a batch finishes, whichever function set its finished_at, 'conveyor_b_<schema>' is
-- notified with its id. The WHEN clause keeps the counter updates of every ack free of a call.
CREATE OR REPLACE FUNCTION notify_batch_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('conveyor_b_' || TG_TABLE_SCHEMA, NEW.id);
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS batches_finished ON batches;
CREATE TRIGGER batches_finished AFTER UPDATE OF finished_at ON batches FOR EACH ROW
    WHEN (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION notify_batch_finished();
