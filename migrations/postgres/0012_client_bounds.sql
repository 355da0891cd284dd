-- 0012: bounds on what clients can make the store keep (issue 28).
--
-- file_uploads: one row per upload in progress (chunks stored, file not yet created): who
-- uploads it (the API key's id; keyless local clients share one name), how many bytes its
-- chunks hold so far and when the last one came. Each chunk is stored in the transaction that
-- checks the uploader's bytes in progress and the bytes of all files and uploads against the
-- `[files]` quotas, so an upload cut short can no longer hold unbounded space until the sweep;
-- the sweep removes an upload whose last chunk is older than its grace period (an active slow
-- upload keeps its chunks), and the row goes with the file's creation. Chunks stored before
-- this migration have no row: they are swept by their age, as before.
--
-- webhook_endpoints.created_by: the key that registered an endpoint through the API, so the
-- endpoints one key may register can be bounded. Endpoints registered before this migration
-- (and the config file's) have none and count against no key.
--
-- Deliberately not here: a foreign key from file_mounts to files. A file deleted while a
-- session mounting it was being created (PostgreSQL, READ COMMITTED) is prevented by row
-- locks instead (a mount holds the file row shared, a delete locks it before it reads the
-- mounts: sql/files.rs), which needs no table rebuild on SQLite and keeps the refusal a
-- typed guard rather than a constraint error.

CREATE TABLE file_uploads (
    file_id    TEXT   PRIMARY KEY,
    owner      TEXT   NOT NULL,
    bytes      BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX file_uploads_by_owner ON file_uploads (owner);
CREATE INDEX file_uploads_by_update ON file_uploads (updated_at);

ALTER TABLE webhook_endpoints ADD COLUMN created_by TEXT;
CREATE INDEX webhook_endpoints_by_creator ON webhook_endpoints (created_by);
