-- 0009: uploaded files (docs/adr/0017).
--
-- A file's content is stored as chunks of at most 1 MiB, each committed on its own while the
-- upload streams in; the files row, written last, makes the file visible. Chunks whose file
-- row never came (an upload cut short) are swept after a grace period.
--
-- file_mounts mirrors the file resources of sessions that are not deleted, so that deleting a
-- file can refuse, in one statement, while a session mounts it.

CREATE TABLE files (
    id         TEXT   PRIMARY KEY,
    filename   TEXT   NOT NULL,
    mime_type  TEXT   NOT NULL,
    size_bytes BIGINT NOT NULL,
    sha256     TEXT   NOT NULL,
    chunks     BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE INDEX files_by_created ON files (created_at, id);

CREATE TABLE file_chunks (
    file_id    TEXT   NOT NULL,
    seq        BIGINT NOT NULL,
    bytes      BYTEA  NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (file_id, seq)
);

CREATE TABLE file_mounts (
    file_id    TEXT NOT NULL,
    session_id TEXT NOT NULL,
    PRIMARY KEY (file_id, session_id)
);

CREATE INDEX file_mounts_by_session ON file_mounts (session_id);
