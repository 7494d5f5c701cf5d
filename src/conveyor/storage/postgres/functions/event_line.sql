-- One NDJSON event line, as Event.to_json writes it (keys left out when empty). `p_m` and
-- `p_d` are JSON already (the message as a JSON string, the data as a JSON object), so text
-- holding U+0000 (which `text` refuses) can travel as its \u0000 escape.
CREATE OR REPLACE FUNCTION event_line(
    p_t float8, p_k text, p_s text DEFAULT NULL, p_m text DEFAULT NULL, p_w text DEFAULT NULL,
    p_a integer DEFAULT 0, p_d text DEFAULT NULL)
RETURNS text LANGUAGE sql STABLE AS $$
    SELECT '{"t":' || to_json(p_t)::text || ',"k":' || to_json(p_k)::text
        || coalesce(',"s":' || to_json(p_s)::text, '')
        || coalesce(',"m":' || p_m, '')
        || coalesce(',"w":' || to_json(p_w)::text, '')
        || CASE WHEN coalesce(p_a, 0) <> 0 THEN ',"a":' || p_a ELSE '' END
        || coalesce(',"d":' || p_d, '') || E'}\n'
$$;
