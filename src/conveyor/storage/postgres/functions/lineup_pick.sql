-- A queue's lineup (docs/scheduling.md): storage/lineup.py's walk, spelled for PostgreSQL,
-- for dequeue_each on a queue holding a lined pending job (line_job.sql). The highest
-- priority first (plain jobs, in jobs_ready, are priority 0); in it the fair keys take turns
-- in byte order after the queue's pointer, one start per turn (the jobs without a key are the
-- key '', first in a round, with the plain jobs among them); in a key, arrival order. A job
-- its gates hold back is passed over (gate_check.sql), looking at most 64 jobs into a key; the
-- first admitted job that does not fit the room ends the walk (nothing behind it starts
-- before it); one costing more than p_capacity (when > 0) is left for a larger worker. The
-- caller holds the gate lock and leases the ids returned, in their order. lineup_top and
-- lineup_next are also what explain reads (postgres/gates.py).

-- The highest priority below p_below (NULL: any) with a pending job of p_queue.
CREATE OR REPLACE FUNCTION lineup_top(p_queue text, p_below integer) RETURNS integer
LANGUAGE plpgsql STABLE SET search_path FROM CURRENT AS $$
DECLARE
    ceiling integer := coalesce(p_below, 101);
    top integer;
BEGIN
    SELECT priority INTO top FROM jobs WHERE state = 'pending' AND lined AND queue = p_queue
        AND priority < ceiling ORDER BY priority DESC LIMIT 1;
    IF ceiling > 0 AND (top IS NULL OR top < 0) AND EXISTS (SELECT 1 FROM jobs
            WHERE state = 'pending' AND NOT lined AND queue = p_queue) THEN
        RETURN 0;
    END IF;
    RETURN top;
END
$$;

-- The first fair key after p_after (NULL: from the start, where '' stands for the jobs
-- without one) with a pending job of p_queue at priority p_band, in byte order.
CREATE OR REPLACE FUNCTION lineup_next(p_queue text, p_band integer, p_after text)
RETURNS text
LANGUAGE plpgsql STABLE SET search_path FROM CURRENT AS $$
BEGIN
    IF p_after IS NULL AND (EXISTS (SELECT 1 FROM jobs WHERE state = 'pending' AND lined
            AND queue = p_queue AND priority = p_band AND fair_key IS NULL)
        OR (p_band = 0 AND EXISTS (SELECT 1 FROM jobs WHERE state = 'pending' AND NOT lined
            AND queue = p_queue))) THEN
        RETURN '';
    END IF;
    RETURN (SELECT fair_key FROM jobs WHERE state = 'pending' AND lined AND queue = p_queue
            AND priority = p_band AND fair_key > coalesce(p_after, '') COLLATE "C"
            ORDER BY fair_key LIMIT 1);
END
$$;

CREATE OR REPLACE FUNCTION lineup_pick(p_now float8, p_queue text, p_room integer,
                                       p_capacity integer) RETURNS text[]
LANGUAGE plpgsql SET search_path FROM CURRENT SET enable_seqscan = off AS $$
DECLARE
    st jsonb := '{"a": {}, "o": {}, "t": [], "r": {}, "b": {}}';
    chosen text[] := '{}';
    room integer := p_room;
    pointer text COLLATE "C";
    served text COLLATE "C";
    pass text COLLATE "C";
    fkey text COLLATE "C";
    second boolean;  -- the round's second part: from the first key up to `pass`
    band integer;
    took boolean;
    r record;
    verdict text;
    -- the key's first job its gates admit
    h_id text; h_ckey text; h_okey text; h_rkey text; h_bkey text; h_cost integer;
BEGIN
    SELECT fair_pointer INTO pointer FROM queues WHERE name = p_queue;
    served := pointer;
    band := lineup_top(p_queue, NULL);
    WHILE room > 0 AND band IS NOT NULL LOOP
        took := false;
        pass := served;
        second := false;
        fkey := lineup_next(p_queue, band, pass);
        IF fkey IS NULL AND pass IS NOT NULL THEN
            second := true;
            fkey := lineup_next(p_queue, band, NULL);
        END IF;
        WHILE fkey IS NOT NULL AND NOT (second AND fkey > pass) LOOP
            h_id := NULL;
            FOR r IN
                SELECT * FROM (
                    (SELECT j.id, j.concurrency_key AS ckey, j.concurrency_limit AS climit,
                            j.order_key AS okey, j.rate_key AS rkey, j.rate_limit AS rlimit,
                            j.rate_period AS rperiod, j.breaker_key AS bkey, j.cost,
                            j.ready_at, j.seq
                     FROM jobs j WHERE j.state = 'pending' AND j.lined AND j.queue = p_queue
                       AND j.priority = band AND fkey <> '' AND j.fair_key = fkey
                       AND j.id <> ALL(chosen)
                     ORDER BY j.ready_at, j.seq LIMIT 64)
                    UNION ALL
                    (SELECT j.id, j.concurrency_key, j.concurrency_limit, j.order_key,
                            j.rate_key, j.rate_limit, j.rate_period, j.breaker_key, j.cost,
                            j.ready_at, j.seq
                     FROM jobs j WHERE j.state = 'pending' AND j.lined AND j.queue = p_queue
                       AND j.priority = band AND fkey = '' AND j.fair_key IS NULL
                       AND j.id <> ALL(chosen)
                     ORDER BY j.ready_at, j.seq LIMIT 64)
                    UNION ALL
                    (SELECT j.id, j.concurrency_key, j.concurrency_limit, j.order_key,
                            j.rate_key, j.rate_limit, j.rate_period, j.breaker_key, 1,
                            j.ready_at, j.seq
                     FROM jobs j WHERE j.state = 'pending' AND NOT j.lined
                       AND j.queue = p_queue AND band = 0 AND fkey = ''
                       AND j.id <> ALL(chosen)
                     ORDER BY j.ready_at, j.seq LIMIT 64)
                ) AS c ORDER BY c.ready_at, c.seq LIMIT 64
            LOOP
                CONTINUE WHEN p_capacity > 0 AND r.cost > p_capacity;
                SELECT g.st, g.verdict INTO st, verdict FROM gate_check(p_now, r.id, r.ckey,
                    r.climit, r.okey, r.rkey, r.rlimit, r.rperiod, r.bkey, r.cost, st) AS g;
                IF verdict = 'start' THEN
                    h_id := r.id; h_ckey := r.ckey; h_okey := r.okey; h_rkey := r.rkey;
                    h_bkey := r.bkey; h_cost := r.cost;
                    EXIT;
                END IF;
            END LOOP;
            IF h_id IS NOT NULL THEN
                IF h_cost > room THEN  -- it waits for room: nothing behind it starts first
                    band := NULL;
                    EXIT;
                END IF;
                st := gate_take(p_now, h_ckey, h_okey, h_rkey, h_bkey, h_cost, st);
                chosen := chosen || h_id;
                room := room - h_cost;
                served := fkey;
                took := true;
                EXIT WHEN room <= 0;
            END IF;
            fkey := lineup_next(p_queue, band, fkey);
            IF fkey IS NULL AND NOT second AND pass IS NOT NULL THEN
                second := true;
                fkey := lineup_next(p_queue, band, NULL);
            END IF;
        END LOOP;
        IF band IS NOT NULL AND NOT took THEN
            band := lineup_top(p_queue, band);
        END IF;
    END LOOP;
    IF served IS DISTINCT FROM pointer THEN
        UPDATE queues SET fair_pointer = served WHERE name = p_queue;
    END IF;
    RETURN chosen;
END
$$;
