-- A batch's completion and its callbacks: each callback fires exactly once, enqueued by the
-- transaction that makes it due (the row lock on the batch orders them). A job retried by
-- hand re-opens a finished batch, so `success` may come after `complete`.
CREATE OR REPLACE FUNCTION settle_batch(p_now float8, p_id text) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT SET enable_seqscan = off AS $$
DECLARE
    b record;
    complete boolean;
    cbs json;
    fired text[];
    due text[] := '{}';
    moment text;
    finished float8;
    spec json;
    target text;
BEGIN
    SELECT closed, total, n_succeeded + n_failed + n_dead + n_cancelled AS done, n_succeeded,
           n_dead, callbacks AS cb, callbacks_fired, finished_at
    INTO b FROM batches WHERE id = p_id FOR UPDATE;
    IF NOT FOUND THEN  -- trimmed away while its jobs lived on
        RETURN;
    END IF;
    complete := b.closed AND b.done >= b.total;
    cbs := coalesce(nullif(b.cb, ''), '{}')::json;
    fired := array_remove(string_to_array(b.callbacks_fired, ','), '');
    FOREACH moment IN ARRAY ARRAY['death', 'complete', 'success'] LOOP
        IF ((moment = 'death' AND b.n_dead > 0) OR (moment = 'complete' AND complete)
                OR (moment = 'success' AND complete AND b.n_succeeded >= b.total))
                AND cbs -> moment IS NOT NULL AND NOT moment = ANY(fired) THEN
            due := due || moment;
        END IF;
    END LOOP;
    finished := CASE WHEN complete THEN coalesce(b.finished_at, p_now) END;
    IF cardinality(due) = 0 AND finished IS NOT DISTINCT FROM b.finished_at THEN
        RETURN;
    END IF;
    UPDATE batches SET callbacks_fired = array_to_string(fired || due, ','),
        finished_at = finished WHERE id = p_id;
    FOREACH moment IN ARRAY due LOOP
        spec := cbs -> moment;
        target := spec ->> 'batch_id';
        -- A target batch that cannot take it: enqueued outside it, rather than failing the
        -- transition that completed this batch.
        IF target IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM batches WHERE id = target AND finished_at IS NULL) THEN
            target := NULL;
        END IF;
        PERFORM enqueue(p_now, ARRAY[spec ->> 'id'], ARRAY[spec ->> 'name'],
            ARRAY[spec ->> 'queue'], ARRAY[spec ->> 'payload'],
            ARRAY[coalesce((spec ->> 'max_retries')::integer, 25)],
            ARRAY[(spec ->> 'timeout')::float8], ARRAY[(spec ->> 'deadline')::float8],
            ARRAY[(spec ->> 'run_at')::float8], ARRAY[target],
            ARRAY[CASE WHEN json_typeof(spec -> 'flow') = 'object' THEN (spec -> 'flow')::text END],
            ARRAY[spec -> 'flow' ->> 'unique_key'], ARRAY[(spec -> 'flow' ->> 'unique_for')::float8],
            ARRAY[spec -> 'flow' ->> 'concurrency_key'],
            ARRAY[(spec -> 'flow' ->> 'concurrency_limit')::integer],
            ARRAY[spec -> 'flow' ->> 'order_key'], ARRAY[spec -> 'flow' ->> 'rate_key'],
            ARRAY[(spec -> 'flow' ->> 'rate_limit')::integer],
            ARRAY[(spec -> 'flow' ->> 'rate_period')::float8]);
    END LOOP;
END
$$;
