-- Every job one worker holds → recovered, and the worker unregistered. Waits for rows an
-- ack is writing, so a job the dead worker acknowledged just before dying is not recovered
-- as well. Returns how many jobs were recovered.
CREATE OR REPLACE FUNCTION release_worker(p_now float8, p_worker text, p_max integer, p_why text,
                                          p_cancelled text) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT SET enable_seqscan = off AS $$
DECLARE
    v_now float8 := clock_now(p_now);
    ids text[];
BEGIN
    SELECT array_agg(id) INTO ids FROM (
        SELECT id FROM jobs WHERE state = 'active' AND worker = p_worker
        ORDER BY id FOR UPDATE) AS s;
    IF ids IS NOT NULL THEN
        PERFORM recover(v_now, ids, p_max, p_why, p_cancelled);
    END IF;
    DELETE FROM workers WHERE id = p_worker;
    RETURN coalesce(cardinality(ids), 0);
END
$$;
