"""The Redis backend (Redis, Valkey, Redis Cluster): Lua transitions, fenced leases.

Layout (``keys.py`` spells every name; ``{q:<queue>}`` and ``{b:<batch>}`` are hash tags):

* per queue: ``jobs`` (hash id → static JSON), ``state`` (hash id → TAB-separated mutable
  fields, newline, NDJSON events), the indexes ``pending`` (list) / ``parked`` (zset, flow
  control) / ``scheduled`` ``active`` ``retrying`` ``succeeded`` ``failed`` ``dead``
  ``cancelled`` (zsets), ``results`` and ``messages`` (hashes), ``meta`` (paused flag and
  outcome counters), ``unique`` and ``flow`` (flow control), ``rates`` and ``rate_ends``
  (zsets: the sliding log of start times per rate key), ``breakers`` and ``breaker_ends``
  (each breaker key's record, and when a closed one's error log runs out), ``notify``
  (wake-up list);
* per batch: ``batch`` (fields, counters per state, callbacks) and ``jobs`` (job → state);
* registries without a tag, written outside scripts: queues, batches, workers; and the
  Cluster doorbells, all in the ``{doorbell}`` slot so one BLPOP can watch many queues.

Each transition is one script on one queue's slot (``lua/<name>.lua``; its header lists the
libraries it includes, ``lua/_<concern>.lua``, and its KEYS, ARGV and returns: see
``scripts.py``). A job's batch is updated by a second, idempotent call, made before an
acknowledgement is applied. Times come from the server's ``TIME`` unless a test clock was
given. Flow-control limits (concurrency, order, rate keys) and breakers apply per queue,
since a script can only touch its queue's slot.

``RedisStorage`` (``storage.py``: the hot path) is made of parts that share one
``RedisContext`` (``context.py``) and inherit nothing: ``enqueue``, ``acks``, ``upkeep``
(promote, recover, cancel, trim), ``batches`` (counters), ``graph`` (settling workflows: its
``sync_batches`` is where every part sends the moves its scripts report), ``admin`` (retry,
kill, delete), ``batch_pages``, ``inspect``, ``flow``, ``breakers`` (their reads, closing
one), ``schedules``, ``outbox``, ``aio``; ``codec`` writes a job's entries, ``records`` reads
them back.
"""
