-- conveyor PostgreSQL schema, version 20: job data by reference kept in the store itself
-- (docs/job-data.md, "Payloads by reference"; storage/postgres/blobs.py). A table only: a
-- blob is written before the job that references it, read when the job runs or its result
-- is read, and deleted by the blob sweep once no job references it
-- (conveyor/worker/blob_sweep.py).

CREATE TABLE blobs (
    key        text PRIMARY KEY,
    created_at double precision NOT NULL,
    data       bytea NOT NULL
);

CREATE INDEX blobs_created ON blobs (created_at);
