-- The rule for every file of this folder (storage/postgres/migrate.py): a numbered migration
-- holds tables, indexes and data moves, applied once; never a function or a trigger. Each
-- function lives, as its current definition only, in ../functions/<name>.sql with the
-- triggers that call it, applied after the migrations whenever its checksum changes. A
-- migration that retires a function's old argument list drops it (DROP FUNCTION IF EXISTS);
-- a data move computes what it needs in its own SQL, since the functions a database has when
-- its migrations run are those of the release it ran before. The migrations up to 18, from
-- when each function change re-declared it here, had their functions taken out: a database
-- that applied them keeps their record, and gets the functions from ../functions/.
--
-- conveyor PostgreSQL schema, version 1 (created inside the schema the URL names).
-- Every hot-path query is served by a partial index over the rows it can touch (pending,
-- active, waiting), so dequeue, promotion and lease recovery stay O(log n) however many
-- finished jobs the table keeps. Times are epoch seconds (double precision), as on SQLite.
-- Text a job writes that may hold U+0000 (which PostgreSQL text refuses) is stored escaped
-- (storage/postgres/text.py); JSON columns hold JSON text, where U+0000 is "\u0000".
-- Idle workers are woken by triggers on jobs and queues (../functions/notify_pending.sql,
-- notify_resumed.sql).

CREATE TABLE jobs (
    seq               bigint GENERATED ALWAYS AS IDENTITY,  -- enqueue order
    id                text PRIMARY KEY,
    name              text NOT NULL,
    queue             text NOT NULL,
    payload           text NOT NULL,
    state             text NOT NULL,
    attempt           integer NOT NULL DEFAULT 0,
    errors            integer NOT NULL DEFAULT 0,
    recoveries        integer NOT NULL DEFAULT 0,
    max_retries       integer NOT NULL DEFAULT 25,
    timeout           double precision,
    deadline          double precision,
    created_at        double precision NOT NULL,
    run_at            double precision,
    ready_at          double precision,   -- when it last became pending: FIFO within a queue
    started_at        double precision,
    finished_at       double precision,   -- set in terminal states only
    batch_id          text,
    worker            text,
    token             text,
    lease_expires_at  double precision,
    cancel_requested  boolean NOT NULL DEFAULT false,
    result            text,
    message           text,
    progress          text,
    flow              text,
    unique_key        text,
    concurrency_key   text,
    concurrency_limit integer NOT NULL DEFAULT 0,
    order_key         text,
    rate_key          text,
    rate_limit        integer NOT NULL DEFAULT 0,
    rate_period       double precision NOT NULL DEFAULT 0,
    gated             boolean NOT NULL DEFAULT false,  -- a concurrency/order/rate key is set
    events            text NOT NULL DEFAULT ''         -- NDJSON, appended with ||
) WITH (fillfactor = 80);

CREATE INDEX jobs_ready ON jobs (queue, ready_at, seq) WHERE state = 'pending';
CREATE INDEX jobs_ready_gated ON jobs (queue) WHERE state = 'pending' AND gated;
CREATE INDEX jobs_ready_deadline ON jobs (queue, deadline)
    WHERE state = 'pending' AND deadline IS NOT NULL;
CREATE INDEX jobs_due ON jobs (run_at) WHERE state IN ('scheduled', 'retrying');
CREATE INDEX jobs_lease ON jobs (lease_expires_at) WHERE state = 'active';
CREATE INDEX jobs_worker ON jobs (worker) WHERE state = 'active';
CREATE INDEX jobs_state_queue ON jobs (state, queue);
CREATE INDEX jobs_seq ON jobs (seq);
CREATE INDEX jobs_batch ON jobs (batch_id, state, seq) WHERE batch_id IS NOT NULL;
CREATE INDEX jobs_finished ON jobs (state, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_concurrency ON jobs (concurrency_key)
    WHERE state = 'active' AND concurrency_key IS NOT NULL;
CREATE INDEX jobs_order ON jobs (order_key, seq)
    WHERE order_key IS NOT NULL AND state IN ('pending', 'active', 'retrying');

CREATE TABLE queues (
    name   text PRIMARY KEY,
    paused boolean NOT NULL DEFAULT false
);

-- All-time outcome totals per (queue, job name); updated once per ack call, not per job.
CREATE TABLE job_totals (
    queue     text NOT NULL,
    name      text NOT NULL,
    processed bigint NOT NULL DEFAULT 0,
    failed    bigint NOT NULL DEFAULT 0,
    dead      bigint NOT NULL DEFAULT 0,
    retried   bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, name)
);

CREATE TABLE daily_totals (
    queue     text NOT NULL,
    day       text NOT NULL,
    processed bigint NOT NULL DEFAULT 0,
    failed    bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, day)
);

CREATE TABLE batches (
    seq             bigint GENERATED ALWAYS AS IDENTITY,
    id              text PRIMARY KEY,
    description     text,
    meta            text NOT NULL DEFAULT '{}',
    callbacks       text NOT NULL DEFAULT '{}',
    callbacks_fired text NOT NULL DEFAULT '',
    created_at      double precision NOT NULL,
    started_at      double precision,
    finished_at     double precision,
    closed          boolean NOT NULL DEFAULT false,
    cancelled       boolean NOT NULL DEFAULT false,
    total           integer NOT NULL DEFAULT 0,
    n_scheduled     integer NOT NULL DEFAULT 0,
    n_pending       integer NOT NULL DEFAULT 0,
    n_active        integer NOT NULL DEFAULT 0,
    n_retrying      integer NOT NULL DEFAULT 0,
    n_succeeded     integer NOT NULL DEFAULT 0,
    n_failed        integer NOT NULL DEFAULT 0,
    n_dead          integer NOT NULL DEFAULT 0,
    n_cancelled     integer NOT NULL DEFAULT 0
);
CREATE INDEX batches_created ON batches (created_at, seq);

CREATE TABLE workers (
    id        text PRIMARY KEY,
    info      text NOT NULL,
    last_seen double precision NOT NULL,
    command   text
);

-- Unique-job locks: held while the job is not terminal and until `until`.
CREATE TABLE unique_locks (
    key    text PRIMARY KEY,
    job_id text NOT NULL,
    until  double precision NOT NULL
);

-- One row per job started under a rate key, for the sliding-window rate limit.
CREATE TABLE rate_hits (
    key text NOT NULL,
    ts  double precision NOT NULL
);
CREATE INDEX rate_hits_key ON rate_hits (key, ts);

CREATE TABLE schedules (
    name       text PRIMARY KEY,
    cron       text NOT NULL,
    tz         text NOT NULL,
    job_name   text NOT NULL,
    queue      text NOT NULL,
    paused     boolean NOT NULL DEFAULT false,
    last_tick  double precision,
    resumed_at double precision,
    created_at double precision
);
