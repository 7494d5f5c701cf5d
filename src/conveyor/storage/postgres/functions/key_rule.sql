-- The key rule (conveyor/text.py key_fault, docs/flow-control.md "Keys"): a concurrency,
-- order, rate or breaker key is 1 to 512 bytes of UTF-8, with no control character, line or
-- paragraph separator. Clients check it at enqueue; a job stored before the rule, or by a client that
-- does not check it, may hold a key past what a B-tree entry takes (about 2,700 bytes), so
-- flow_pick and start_each end such a job before any limit counts it. Both functions in one
-- file: broken_key is LANGUAGE sql, checked against key_breaks when it is created.
CREATE OR REPLACE FUNCTION key_breaks(p_key text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT p_key IS NOT NULL AND p_key <> ''
        AND (octet_length(p_key) > 512 OR p_key ~ '[\x01-\x1f\x7f-\x9f\u2028\u2029]')
$$;

-- The message of a job whose concurrency, order, rate or breaker key (in that order) breaks
-- the rule (rules.broken_key_message spells the same words), or NULL.
CREATE OR REPLACE FUNCTION broken_key(p_ckey text, p_okey text, p_rkey text, p_bkey text)
RETURNS text
LANGUAGE sql IMMUTABLE SET search_path FROM CURRENT AS $$
    SELECT CASE WHEN key_breaks(p_ckey) THEN 'concurrency key'
                WHEN key_breaks(p_okey) THEN 'order key'
                WHEN key_breaks(p_rkey) THEN 'rate key'
                WHEN key_breaks(p_bkey) THEN 'breaker key' END
        || ' breaks the key rule (1 to 512 bytes of UTF-8, no control characters or line '
        || 'breaks): the job cannot start'
$$;
