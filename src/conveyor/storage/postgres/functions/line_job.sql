-- A job stored with a priority, aging, a fair key or a cost above one (its flow settings,
-- FlowControl.in_lineup) is "lined": its queue's lineup walk starts it (lineup_pick.sql), not
-- the arrival-order path; it is gated too, so that dequeue's one look at jobs_ready_gated
-- sends its queue the long way. Aging counts from when the job was first due. A BEFORE
-- trigger on every insert path (enqueue, enqueue_one, workflows, callbacks, aggregation);
-- its WHEN clause costs nothing for a job without those settings.
CREATE OR REPLACE FUNCTION line_job() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    f jsonb := NEW.flow::jsonb;
BEGIN
    NEW.priority := coalesce((f ->> 'priority')::integer, 0);
    NEW.fair_key := f ->> 'fair_key';
    NEW.cost := coalesce((f ->> 'cost')::integer, 1);
    NEW.aging := nullif((f ->> 'aging')::float8, 0);
    NEW.age_next := NEW.aging + greatest(NEW.created_at, NEW.run_at);
    NEW.lined := NEW.priority <> 0 OR NEW.aging IS NOT NULL OR NEW.fair_key IS NOT NULL
                 OR NEW.cost <> 1;
    NEW.gated := NEW.gated OR NEW.lined;
    RETURN NEW;
END
$$;
DROP TRIGGER IF EXISTS jobs_lined ON jobs;
CREATE TRIGGER jobs_lined BEFORE INSERT ON jobs FOR EACH ROW
    WHEN (NEW.flow ~ '"(priority|aging|fair_key|cost)"') EXECUTE FUNCTION line_job();
