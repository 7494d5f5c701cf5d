-- Whether job p_id's breaker and flow limits (concurrency, counting costs; order; rate) let
-- it start now. p_take: and if so, record its start in the rate log (a start does; a relay
-- asking of a parked job does not; the start marks a probe once leased: breaker_probe). The caller holds the gate lock (dequeue's) and leases the job in the
-- same transaction, so a second job of the same key, asked next, sees the first one active.
-- A job whose key breaks the key rule is never admitted to start (start_each ends it before
-- asking) and is due for a relay (p_take false), so that its start ends it.
CREATE OR REPLACE FUNCTION flow_admits(p_now float8, p_id text, p_take boolean) RETURNS boolean
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    r record;
BEGIN
    SELECT concurrency_key AS ckey, concurrency_limit AS climit, order_key AS okey,
           rate_key AS rkey, rate_limit AS rlimit, rate_period AS rperiod,
           breaker_key AS bkey, cost
    INTO r FROM jobs WHERE id = p_id;
    IF broken_key(r.ckey, r.okey, r.rkey, r.bkey) IS NOT NULL THEN
        RETURN NOT p_take;
    END IF;
    IF r.bkey IS NOT NULL AND breaker_gate(p_now, r.bkey) = 'h' THEN
        RETURN false;
    END IF;
    IF r.ckey IS NOT NULL AND r.climit > 0 AND (SELECT coalesce(sum(cost), 0) FROM jobs
            WHERE state = 'active' AND concurrency_key = r.ckey) + r.cost > r.climit THEN
        RETURN false;
    END IF;
    IF r.okey IS NOT NULL AND (SELECT id FROM jobs WHERE order_key = r.okey
            AND state IN ('pending', 'active', 'retrying') AND octet_length(order_key) <= 512
            ORDER BY seq LIMIT 1) IS DISTINCT FROM p_id THEN
        RETURN false;
    END IF;
    IF r.rkey IS NOT NULL AND r.rlimit > 0 THEN
        DELETE FROM rate_hits WHERE key = r.rkey AND ts <= p_now - r.rperiod;
        IF (SELECT count(*) FROM rate_hits WHERE key = r.rkey) >= r.rlimit THEN
            RETURN false;
        END IF;
        IF p_take THEN
            INSERT INTO rate_hits (key, ts) VALUES (r.rkey, p_now);
        END IF;
    END IF;
    RETURN true;
END
$$;
