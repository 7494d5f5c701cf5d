"""Plain data and rules, no I/O: a job's records and states (``job``), its workflow node and
flow-control settings (``node``, ``flow_control``), ids, clocks, the text rule, JSON payloads,
retry backoff, call checks, stored names and a failed job's exception rebuilt; job data's
rules (docs/job-data.md): typed arguments (``typed``), keys and sealing (``encryption``) and
the stored forms of sealed and referenced data (``envelope``); a durable job's records
(``steps``: its steps, what it waits for, the messages sent to it; docs/durable.md). Every
other package builds on these."""
