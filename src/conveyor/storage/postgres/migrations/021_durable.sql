-- conveyor PostgreSQL schema, version 21: durable jobs (docs/durable.md). Tables only; the
-- transitions are functions (durable_*.sql), and a job's rows go with it (durable_forget.sql).
--
-- * durable_steps: one row per (job, step name); `body` is the record (Step.to_json),
--   `final` true once it may never be replaced, `seq` the order steps were first recorded,
--   `origin` the message a wait took (a kept event reaches a job once).
-- * durable_waits: what a job waits for (one wait at a time); `listening` until an event
--   answers it (the job then takes that event from its inbox when it runs again).
-- * durable_inbox: messages sent to a job (by id, or events delivered to its wait), oldest
--   first by `seq`.
-- * durable_kept: events kept for waits that begin later (send_event's `keep`), until `until`.

CREATE TABLE durable_steps (
    job_id text NOT NULL,
    name   text NOT NULL,
    seq    integer NOT NULL,
    final  boolean NOT NULL,
    origin text,
    body   text NOT NULL,
    PRIMARY KEY (job_id, name)
);

CREATE TABLE durable_waits (
    job_id    text PRIMARY KEY,
    kind      text NOT NULL,
    step      text NOT NULL,
    name      text NOT NULL,
    ekey      text NOT NULL,
    until     double precision NOT NULL,
    lookback  double precision NOT NULL,
    since     double precision NOT NULL,
    listening boolean NOT NULL
);
CREATE INDEX durable_listeners ON durable_waits (name, ekey) WHERE kind = 'event' AND listening;

CREATE TABLE durable_inbox (
    seq     bigserial PRIMARY KEY,
    job_id  text NOT NULL,
    id      text NOT NULL,
    kind    text NOT NULL,
    name    text NOT NULL,
    ekey    text NOT NULL,
    data    text NOT NULL,
    sent_at double precision NOT NULL,
    UNIQUE (job_id, id)
);
CREATE INDEX durable_inbox_topic ON durable_inbox (job_id, kind, name, ekey, seq);

CREATE TABLE durable_kept (
    seq     bigserial PRIMARY KEY,
    id      text NOT NULL,
    name    text NOT NULL,
    ekey    text NOT NULL,
    data    text NOT NULL,
    sent_at double precision NOT NULL,
    until   double precision NOT NULL
);
CREATE INDEX durable_kept_event ON durable_kept (name, ekey, sent_at);
CREATE INDEX durable_kept_until ON durable_kept (until);
