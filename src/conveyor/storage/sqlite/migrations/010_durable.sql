-- Durable jobs (docs/durable.md): a job's recorded steps, what it waits for, the messages in
-- its inbox, and events kept for waits that begin later. A job's rows go with it (trigger).

-- One row per (job, step name); ``body`` is the record (``Step.to_json``), ``final`` 1 once
-- it may never be replaced, ``seq`` the order steps were first recorded, ``origin`` the
-- message a wait took (a kept event is received by a job once).
CREATE TABLE durable_steps (
    job_id TEXT NOT NULL,
    name   TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    final  INTEGER NOT NULL,
    origin TEXT,
    body   TEXT NOT NULL,
    PRIMARY KEY (job_id, name)
) WITHOUT ROWID;

-- What a job waits for (one wait at a time). ``listening`` is 1 until an event answers it:
-- the job then takes that event from its inbox when it runs again.
CREATE TABLE durable_waits (
    job_id    TEXT PRIMARY KEY,
    kind      TEXT NOT NULL,
    step      TEXT NOT NULL,
    name      TEXT NOT NULL,
    ekey      TEXT NOT NULL,
    until     REAL NOT NULL,
    lookback  REAL NOT NULL,
    since     REAL NOT NULL,
    listening INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX durable_listeners ON durable_waits (name, ekey) WHERE kind = 'event' AND listening = 1;

-- Messages sent to a job (by id, or events delivered to its wait), oldest first by ``seq``.
CREATE TABLE durable_inbox (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id  TEXT NOT NULL,
    id      TEXT NOT NULL,
    kind    TEXT NOT NULL,
    name    TEXT NOT NULL,
    ekey    TEXT NOT NULL,
    data    TEXT NOT NULL,
    sent_at REAL NOT NULL,
    UNIQUE (job_id, id)
);
CREATE INDEX durable_inbox_topic ON durable_inbox (job_id, kind, name, ekey, seq);

-- Events kept for waits that begin later (``app.send_event(keep=...)``), until ``until``.
CREATE TABLE durable_kept (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    id      TEXT NOT NULL,
    name    TEXT NOT NULL,
    ekey    TEXT NOT NULL,
    data    TEXT NOT NULL,
    sent_at REAL NOT NULL,
    until   REAL NOT NULL
);
CREATE INDEX durable_kept_event ON durable_kept (name, ekey, sent_at);
CREATE INDEX durable_kept_until ON durable_kept (until);

CREATE TRIGGER durable_forget AFTER DELETE ON jobs BEGIN
    DELETE FROM durable_steps WHERE job_id = OLD.id;
    DELETE FROM durable_waits WHERE job_id = OLD.id;
    DELETE FROM durable_inbox WHERE job_id = OLD.id;
END;
