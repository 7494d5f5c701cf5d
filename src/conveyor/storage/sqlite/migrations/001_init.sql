-- conveyor SQLite schema, version 1.
-- Every hot-path query is served by a partial index over the rows it can touch, so dequeue,
-- promotion and lease recovery stay O(log n) however many finished jobs the table keeps.

CREATE TABLE jobs (
    id                TEXT PRIMARY KEY,
    name              TEXT NOT NULL,
    queue             TEXT NOT NULL,
    payload           TEXT NOT NULL,
    state             TEXT NOT NULL,
    attempt           INTEGER NOT NULL DEFAULT 0,
    errors            INTEGER NOT NULL DEFAULT 0,
    recoveries        INTEGER NOT NULL DEFAULT 0,
    max_retries       INTEGER NOT NULL DEFAULT 25,
    timeout           REAL,
    deadline          REAL,
    created_at        REAL NOT NULL,
    run_at            REAL,
    ready_at          REAL,          -- when it last became pending: FIFO order within a queue
    started_at        REAL,
    finished_at       REAL,          -- set in terminal states only
    batch_id          TEXT,
    worker            TEXT,
    token             TEXT,
    lease_expires_at  REAL,
    cancel_requested  INTEGER NOT NULL DEFAULT 0,
    result            TEXT,
    message           TEXT,
    progress          TEXT,
    flow              TEXT,
    unique_key        TEXT,
    concurrency_key   TEXT,
    concurrency_limit INTEGER NOT NULL DEFAULT 0,
    order_key         TEXT,
    rate_key          TEXT,
    rate_limit        INTEGER NOT NULL DEFAULT 0,
    rate_period       REAL NOT NULL DEFAULT 0,
    gated             INTEGER NOT NULL DEFAULT 0,  -- 1 when a concurrency/order/rate key is set
    events            TEXT NOT NULL DEFAULT ''     -- NDJSON, appended with ||
);

CREATE INDEX jobs_ready ON jobs (queue, ready_at) WHERE state = 'pending';
CREATE INDEX jobs_ready_gated ON jobs (queue) WHERE state = 'pending' AND gated = 1;
CREATE INDEX jobs_ready_deadline ON jobs (queue, deadline)
    WHERE state = 'pending' AND deadline IS NOT NULL;
CREATE INDEX jobs_due ON jobs (run_at) WHERE state IN ('scheduled', 'retrying');
CREATE INDEX jobs_lease ON jobs (lease_expires_at) WHERE state = 'active';
CREATE INDEX jobs_state_queue ON jobs (state, queue);
CREATE INDEX jobs_batch ON jobs (batch_id, state) WHERE batch_id IS NOT NULL;
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_concurrency ON jobs (concurrency_key)
    WHERE state = 'active' AND concurrency_key IS NOT NULL;
CREATE INDEX jobs_order ON jobs (order_key)
    WHERE order_key IS NOT NULL AND state IN ('pending', 'active', 'retrying');

CREATE TABLE queues (
    name   TEXT PRIMARY KEY,
    paused INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- All-time outcome totals per (queue, job name); updated once per ack call, not per job.
CREATE TABLE job_totals (
    queue     TEXT NOT NULL,
    name      TEXT NOT NULL,
    processed INTEGER NOT NULL DEFAULT 0,
    failed    INTEGER NOT NULL DEFAULT 0,
    dead      INTEGER NOT NULL DEFAULT 0,
    retried   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, name)
) WITHOUT ROWID;

CREATE TABLE daily_totals (
    queue     TEXT NOT NULL,
    day       TEXT NOT NULL,
    processed INTEGER NOT NULL DEFAULT 0,
    failed    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, day)
) WITHOUT ROWID;

CREATE TABLE batches (
    id              TEXT PRIMARY KEY,
    description     TEXT,
    meta            TEXT NOT NULL DEFAULT '{}',
    callbacks       TEXT NOT NULL DEFAULT '{}',
    callbacks_fired TEXT NOT NULL DEFAULT '',
    created_at      REAL NOT NULL,
    started_at      REAL,
    finished_at     REAL,
    closed          INTEGER NOT NULL DEFAULT 0,
    cancelled       INTEGER NOT NULL DEFAULT 0,
    total           INTEGER NOT NULL DEFAULT 0,
    n_scheduled     INTEGER NOT NULL DEFAULT 0,
    n_pending       INTEGER NOT NULL DEFAULT 0,
    n_active        INTEGER NOT NULL DEFAULT 0,
    n_retrying      INTEGER NOT NULL DEFAULT 0,
    n_succeeded     INTEGER NOT NULL DEFAULT 0,
    n_failed        INTEGER NOT NULL DEFAULT 0,
    n_dead          INTEGER NOT NULL DEFAULT 0,
    n_cancelled     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX batches_created ON batches (created_at);

CREATE TABLE workers (
    id        TEXT PRIMARY KEY,
    info      TEXT NOT NULL,
    last_seen REAL NOT NULL,
    command   TEXT
);

-- Unique-job locks: held while the job is not terminal and until `until`.
CREATE TABLE unique_locks (
    key    TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    until  REAL NOT NULL
) WITHOUT ROWID;

-- One row per job started under a rate key, for the sliding-window rate limit.
CREATE TABLE rate_hits (
    key TEXT NOT NULL,
    ts  REAL NOT NULL
);
CREATE INDEX rate_hits_key ON rate_hits (key, ts);
