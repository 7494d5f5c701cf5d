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
-- A run that ends (an ack, a reclaimed lease) frees what held its key's other jobs: a
-- concurrency slot, an ordered key's turn, a breaker's probe. Only a job with such a key
-- rings (a plain ack matches no row here); one made pending rang above already. The key's
-- held jobs of the job's own queue are woken: those of another queue start at their idle
-- worker's next wait.
DROP TRIGGER IF EXISTS jobs_freed ON jobs;
CREATE TRIGGER jobs_freed AFTER UPDATE OF state ON jobs FOR EACH ROW
    WHEN (OLD.state = 'active' AND NEW.state NOT IN ('active', 'pending')
          AND (OLD.concurrency_key IS NOT NULL OR OLD.order_key IS NOT NULL
               OR OLD.breaker_key IS NOT NULL))
    EXECUTE FUNCTION notify_pending();
