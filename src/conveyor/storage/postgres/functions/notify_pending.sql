-- Waking idle workers: every row that becomes pending notifies the channel
-- 'conveyor_<schema>' with its queue's name, delivered when its transaction commits and
-- folded by PostgreSQL to one notification per queue and transaction. Row triggers with a
-- WHEN clause cost nothing for the rows they do not match (acks, heartbeats, logs).
CREATE OR REPLACE FUNCTION notify_pending() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('conveyor_' || TG_TABLE_SCHEMA, NEW.queue);
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS jobs_inserted ON jobs;
CREATE TRIGGER jobs_inserted AFTER INSERT ON jobs FOR EACH ROW
    WHEN (NEW.state = 'pending') EXECUTE FUNCTION notify_pending();
DROP TRIGGER IF EXISTS jobs_pending ON jobs;
CREATE TRIGGER jobs_pending AFTER UPDATE OF state ON jobs FOR EACH ROW
    WHEN (NEW.state = 'pending' AND OLD.state <> 'pending') EXECUTE FUNCTION notify_pending();
