-- Flow control: ids of up to `p_need` pending jobs of one queue that their concurrency,
-- order and rate limits admit now, in queue order. The caller holds the gate lock, so
-- counting a limit and taking it never interleave between transactions. At most 4096
-- pending jobs are looked at per call, bounding the work when many are held back. A job
-- whose key breaks the key rule ends dead (end_broken) before any limit counts it; the order
-- lookup names jobs_order's predicate, so the planner may use that index.
CREATE OR REPLACE FUNCTION flow_pick(p_now float8, p_queue text, p_need integer) RETURNS text[]
LANGUAGE plpgsql SET search_path FROM CURRENT SET enable_seqscan = off AS $$
DECLARE
    r record;
    chosen text[] := '{}';
    active jsonb := '{}';       -- concurrency key -> active jobs, counting this call's
    order_first jsonb := '{}';  -- order key -> the oldest unfinished job's id
    order_taken text[] := '{}';
    rate_used jsonb := '{}';    -- rate key -> starts within its window
    why text;
BEGIN
    FOR r IN
        SELECT id, concurrency_key AS ckey, concurrency_limit AS climit, order_key AS okey,
               rate_key AS rkey, rate_limit AS rlimit, rate_period AS rperiod
        FROM jobs WHERE state = 'pending' AND queue = p_queue
        ORDER BY ready_at, seq LIMIT 4096
    LOOP
        why := broken_key(r.ckey, r.okey, r.rkey);
        IF why IS NOT NULL THEN
            PERFORM end_broken(p_now, r.id, why);
            CONTINUE;
        END IF;
        IF r.ckey IS NOT NULL THEN
            IF NOT active ? r.ckey THEN
                active := active || jsonb_build_object(r.ckey, (SELECT count(*) FROM jobs
                    WHERE state = 'active' AND concurrency_key = r.ckey));
            END IF;
            CONTINUE WHEN (active ->> r.ckey)::integer >= r.climit;
        END IF;
        IF r.okey IS NOT NULL THEN
            CONTINUE WHEN r.okey = ANY(order_taken);
            IF NOT order_first ? r.okey THEN
                order_first := order_first || jsonb_build_object(r.okey, (SELECT id FROM jobs
                    WHERE order_key = r.okey AND state IN ('pending', 'active', 'retrying')
                      AND octet_length(order_key) <= 512
                    ORDER BY seq LIMIT 1));
            END IF;
            CONTINUE WHEN (order_first ->> r.okey) IS DISTINCT FROM r.id;
        END IF;
        IF r.rkey IS NOT NULL THEN
            IF NOT rate_used ? r.rkey THEN
                DELETE FROM rate_hits WHERE key = r.rkey AND ts <= p_now - r.rperiod;
                rate_used := rate_used || jsonb_build_object(r.rkey,
                    (SELECT count(*) FROM rate_hits WHERE key = r.rkey));
            END IF;
            CONTINUE WHEN (rate_used ->> r.rkey)::integer >= r.rlimit;
        END IF;
        IF r.ckey IS NOT NULL THEN
            active := active || jsonb_build_object(r.ckey, (active ->> r.ckey)::integer + 1);
        END IF;
        IF r.okey IS NOT NULL THEN
            order_taken := order_taken || r.okey;
        END IF;
        IF r.rkey IS NOT NULL THEN
            rate_used := rate_used || jsonb_build_object(r.rkey, (rate_used ->> r.rkey)::integer + 1);
            INSERT INTO rate_hits (key, ts) VALUES (r.rkey, p_now);
        END IF;
        chosen := chosen || r.id;
        EXIT WHEN cardinality(chosen) >= p_need;
    END LOOP;
    RETURN chosen;
END
$$;
