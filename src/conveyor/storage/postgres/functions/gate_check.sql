-- The flow gates one pending job meets when it would start (flow_pick's and lineup_pick's):
-- its key rule, its breaker, concurrency (counting costs), order and rate. `st` carries what
-- the call counted so far: {"a": concurrency key -> cost active, "o": order key -> the oldest
-- unfinished job's id, "t": order keys taken, "r": rate key -> starts in the window, "b":
-- breaker key -> breaker_gate's word, 'h' once the call takes the key's probe}. The
-- caller holds the gate lock (dequeue_each's). gate_check's verdict: 'start', 'held' (a limit
-- holds it back: it stays pending), or 'ended' (its key breaks the key rule: end_broken ended
-- it dead); gate_take counts a job the caller starts.
CREATE OR REPLACE FUNCTION gate_check(
    p_now float8, p_id text, p_ckey text, p_climit integer, p_okey text, p_rkey text,
    p_rlimit integer, p_rperiod float8, p_bkey text, p_cost integer, INOUT st jsonb,
    OUT verdict text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    why text := broken_key(p_ckey, p_okey, p_rkey, p_bkey);
BEGIN
    IF why IS NOT NULL THEN
        PERFORM end_broken(p_now, p_id, why);
        verdict := 'ended';
        RETURN;
    END IF;
    verdict := 'held';
    IF p_bkey IS NOT NULL THEN  -- an open breaker holds its jobs back, whatever else admits
        IF NOT (st -> 'b') ? p_bkey THEN
            st := jsonb_set(st, ARRAY['b', p_bkey], to_jsonb(breaker_gate(p_now, p_bkey)));
        END IF;
        IF st -> 'b' ->> p_bkey = 'h' THEN
            RETURN;
        END IF;
    END IF;
    IF p_ckey IS NOT NULL THEN
        IF NOT (st -> 'a') ? p_ckey THEN
            st := jsonb_set(st, ARRAY['a', p_ckey], to_jsonb((SELECT coalesce(sum(cost), 0)
                FROM jobs WHERE state = 'active' AND concurrency_key = p_ckey)));
        END IF;
        IF p_climit > 0 AND (st -> 'a' ->> p_ckey)::integer + p_cost > p_climit THEN
            RETURN;
        END IF;
    END IF;
    IF p_okey IS NOT NULL THEN
        IF (st -> 't') ? p_okey THEN
            RETURN;
        END IF;
        IF NOT (st -> 'o') ? p_okey THEN  -- names jobs_order's predicate, for its index
            st := jsonb_set(st, ARRAY['o', p_okey], coalesce(to_jsonb((SELECT id FROM jobs
                WHERE order_key = p_okey AND state IN ('pending', 'active', 'retrying')
                  AND octet_length(order_key) <= 512
                ORDER BY seq LIMIT 1)), 'null'::jsonb));
        END IF;
        IF (st -> 'o' ->> p_okey) IS DISTINCT FROM p_id THEN
            RETURN;
        END IF;
    END IF;
    IF p_rkey IS NOT NULL THEN
        IF NOT (st -> 'r') ? p_rkey THEN
            DELETE FROM rate_hits WHERE key = p_rkey AND ts <= p_now - p_rperiod;
            st := jsonb_set(st, ARRAY['r', p_rkey],
                            to_jsonb((SELECT count(*) FROM rate_hits WHERE key = p_rkey)));
        END IF;
        IF (st -> 'r' ->> p_rkey)::integer >= p_rlimit THEN
            RETURN;
        END IF;
    END IF;
    verdict := 'start';
END
$$;

-- (A probe taken holds its key's other jobs back for the rest of the call; the caller marks
-- it the probe once leased: breaker_probe.)
CREATE OR REPLACE FUNCTION gate_take(p_now float8, p_ckey text, p_okey text, p_rkey text,
                                     p_bkey text, p_cost integer, INOUT st jsonb)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF p_bkey IS NOT NULL AND st -> 'b' ->> p_bkey = 'p' THEN
        st := jsonb_set(st, ARRAY['b', p_bkey], '"h"');
    END IF;
    IF p_ckey IS NOT NULL THEN
        st := jsonb_set(st, ARRAY['a', p_ckey],
                        to_jsonb((st -> 'a' ->> p_ckey)::integer + p_cost));
    END IF;
    IF p_okey IS NOT NULL THEN
        st := jsonb_set(st, '{t}', (st -> 't') || to_jsonb(p_okey));
    END IF;
    IF p_rkey IS NOT NULL THEN
        st := jsonb_set(st, ARRAY['r', p_rkey], to_jsonb((st -> 'r' ->> p_rkey)::integer + 1));
        INSERT INTO rate_hits (key, ts) VALUES (p_rkey, p_now);
    END IF;
END
$$;
