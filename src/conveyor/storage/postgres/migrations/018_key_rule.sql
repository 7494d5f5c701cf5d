-- conveyor PostgreSQL schema, version 18: a stored key that breaks the key rule ends its own
-- job, and a delivery starts only a job of the queue it came from.
--
-- Nothing here changes a table: every job is kept; one index is rebuilt.
--
-- * The key rule (conveyor/text.py key_fault, docs/flow-control.md "Keys"): 1 to 512 bytes
--   of UTF-8, no control character, line or paragraph separator. Clients check it at
--   enqueue; a job stored before the rule, or by a client that does not check it, could hold
--   a concurrency, order or rate key past what a B-tree entry takes (about 2,700 bytes):
--   every dequeue of its queue then failed on jobs_concurrency or rate_hits_key, for good.
--   flow_pick (dequeue) and start_each (a broker's start) now end such a job dead with the
--   reason, as they end a job past its deadline, before counting any limit; jobs_order leaves
--   such keys out, so the job can be stored and promoted and then meets that end.
-- * start (and start_set, start_each) started any job whose id a delivery carried, whatever
--   its queue: a message of another queue's (another app's) job ran it on a worker that does
--   not serve that queue. A job of another queue, or an unknown id, is now 'foreign': the
--   worker drops the delivery and counts it.
-- (../functions/key_rule.sql, end_broken.sql, flow_pick.sql, flow_admits.sql, start.sql,
-- start_set.sql, start_each.sql.)

DROP INDEX jobs_order;
CREATE INDEX jobs_order ON jobs (order_key, seq)
    WHERE order_key IS NOT NULL AND state IN ('pending', 'active', 'retrying')
      AND octet_length(order_key) <= 512;
