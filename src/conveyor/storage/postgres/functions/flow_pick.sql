-- Flow control: ids of up to `p_need` pending jobs of one queue that their breaker and their
-- concurrency, order and rate limits admit now, in queue order (a queue holding no lined job: those are
-- lineup_pick's). The caller holds the gate lock, so counting a limit and taking it never
-- interleave between transactions. At most 4096 pending jobs are looked at per call, bounding
-- the work when many are held back. A job whose key breaks the key rule ends dead
-- (end_broken) before any limit counts it (gate_check.sql).
CREATE OR REPLACE FUNCTION flow_pick(p_now float8, p_queue text, p_need integer) RETURNS text[]
LANGUAGE plpgsql SET search_path FROM CURRENT SET enable_seqscan = off AS $$
DECLARE
    r record;
    chosen text[] := '{}';
    st jsonb := '{"a": {}, "o": {}, "t": [], "r": {}, "b": {}}';
    verdict text;
BEGIN
    FOR r IN
        SELECT id, concurrency_key AS ckey, concurrency_limit AS climit, order_key AS okey,
               rate_key AS rkey, rate_limit AS rlimit, rate_period AS rperiod,
               breaker_key AS bkey
        FROM jobs WHERE state = 'pending' AND NOT lined AND queue = p_queue
        ORDER BY ready_at, seq LIMIT 4096
    LOOP
        SELECT g.st, g.verdict INTO st, verdict FROM gate_check(p_now, r.id, r.ckey, r.climit,
            r.okey, r.rkey, r.rlimit, r.rperiod, r.bkey, 1, st) AS g;
        CONTINUE WHEN verdict <> 'start';
        st := gate_take(p_now, r.ckey, r.okey, r.rkey, r.bkey, 1, st);
        chosen := chosen || r.id;
        EXIT WHEN cardinality(chosen) >= p_need;
    END LOOP;
    RETURN chosen;
END
$$;
