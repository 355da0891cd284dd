-- 0003: durable state that adapters and backends keep beside the event log.
--
-- session_bindings: small facts a backend must find again after a restart, written in the
--   same fenced transaction as the events they explain (e.g. the id an ACP agent process
--   gave its session, or a remote A2A task id: the outbound backend resumes that task instead
--   of sending the message twice).
-- documents: JSON documents in namespaces, owned by protocol adapters (e.g. A2A task records
--   and push-notification configs), so protocol vocabulary stays out of this schema. Each
--   document has a version for compare-and-set updates.
-- outbox: HTTP deliveries (webhooks, push notifications) that must survive restarts; a
--   delivery is leased while in flight and retried with backoff until it succeeds or gives up.
-- Deliberately no foreign keys to sessions: a delivery about a deleted session is still owed.

CREATE TABLE session_bindings (
    session_id TEXT   NOT NULL REFERENCES sessions (id),
    key        TEXT   NOT NULL,
    value      TEXT   NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (session_id, key)
);

CREATE TABLE documents (
    namespace  TEXT   NOT NULL,
    key        TEXT   NOT NULL,
    body       TEXT   NOT NULL,
    version    BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (namespace, key)
);

CREATE TABLE outbox (
    id              TEXT    PRIMARY KEY,
    topic           TEXT    NOT NULL,        -- who owns it, e.g. a push config id; ordering key
    url             TEXT    NOT NULL,
    headers         TEXT    NOT NULL,        -- JSON object of header name -> value
    body            TEXT    NOT NULL,
    state           TEXT    NOT NULL,        -- pending | delivered | failed
    attempts        BIGINT  NOT NULL DEFAULT 0,
    next_attempt_at BIGINT  NOT NULL,
    lease_owner     TEXT,
    lease_expires_at BIGINT,
    last_error      TEXT,
    created_at      BIGINT  NOT NULL,
    updated_at      BIGINT  NOT NULL
);
CREATE INDEX outbox_due ON outbox (state, next_attempt_at);
CREATE INDEX outbox_by_topic ON outbox (topic, created_at);
