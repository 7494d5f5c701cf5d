-- Whether marks wait: VOLATILE, so it sees what the statement calling it wrote before
-- (``SELECT ack(...), wf_pending()`` tells in the ack's own round trip).
CREATE OR REPLACE FUNCTION wf_pending() RETURNS boolean LANGUAGE sql VOLATILE
SET search_path FROM CURRENT AS $$ SELECT EXISTS (SELECT 1 FROM wf_marks) $$;
