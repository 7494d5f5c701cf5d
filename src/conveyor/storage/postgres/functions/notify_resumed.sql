-- Resuming a paused queue wakes its workers too (on the channel notify_pending rings).
CREATE OR REPLACE FUNCTION notify_resumed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('conveyor_' || TG_TABLE_SCHEMA, NEW.name);
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS queues_resumed ON queues;
CREATE TRIGGER queues_resumed AFTER UPDATE OF paused ON queues FOR EACH ROW
    WHEN (OLD.paused AND NOT NEW.paused) EXECUTE FUNCTION notify_resumed();
