-- Durable jobs (docs/durable.md): a deleted job's steps, wait and inbox go with it, whatever
-- deleted it (trim, an operator). One statement-level trigger: a trim's DELETE of a thousand
-- jobs runs three DELETEs, not three per job.
CREATE OR REPLACE FUNCTION durable_forget() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM durable_steps WHERE job_id IN (SELECT id FROM gone);
    DELETE FROM durable_waits WHERE job_id IN (SELECT id FROM gone);
    DELETE FROM durable_inbox WHERE job_id IN (SELECT id FROM gone);
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS durable_forget ON jobs;
CREATE TRIGGER durable_forget AFTER DELETE ON jobs REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION durable_forget();
