-- Jobs whose lease expired (or was never set) → recovered; rows another transaction holds
-- are skipped (the next call gets them). Returns how many jobs were recovered.
CREATE OR REPLACE FUNCTION reclaim(p_now float8, p_max integer, p_limit integer, p_why text,
                                   p_cancelled text) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT SET enable_seqscan = off AS $$
DECLARE
    v_now float8 := clock_now(p_now);
    ids text[];
BEGIN
    SELECT array_agg(id) INTO ids FROM (
        SELECT id FROM jobs WHERE state = 'active'
            AND (lease_expires_at <= v_now OR lease_expires_at IS NULL)
        LIMIT p_limit FOR UPDATE SKIP LOCKED) AS s;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM recover(v_now, ids, p_max, p_why, p_cancelled);
    RETURN cardinality(ids);
END
$$;
