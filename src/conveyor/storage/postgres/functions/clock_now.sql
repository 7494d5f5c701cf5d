-- The storage clock: the given time, or the server's. Every function takes it as `p_now`
-- (epoch seconds): NULL means the server's clock_timestamp(), a test's FakeClock passes its own.
CREATE OR REPLACE FUNCTION clock_now(p_now float8) RETURNS float8
LANGUAGE sql VOLATILE AS $$
    SELECT coalesce(p_now, extract(epoch FROM clock_timestamp())::float8)
$$;
