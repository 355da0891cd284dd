-- 0006: self-hosted environments (docs/adr/0013).
--
-- Environment keys live beside API keys, hashed the same way, with the environment they are
-- valid for: one lookup by hash answers both kinds, and a key with an environment_id is
-- never an API key (it is not counted as one, so creating it does not close a keyless
-- gateway to its local clients).
--
-- A work item is one executor's hold on one session, as the Managed Agents work queue
-- speaks it. At most one item per session is live (not stopped), so two executors never
-- serve one session. Leases are kept on the database clock, like run leases.
--
-- sessions.connection keeps a self-hosted session's executor connection (pending,
-- connected, disconnected, failed), written in the transaction that appends the event
-- reporting the change.

ALTER TABLE api_keys ADD COLUMN environment_id TEXT;
CREATE INDEX api_keys_by_environment ON api_keys (environment_id, created_at, id);

ALTER TABLE sessions ADD COLUMN connection TEXT;

CREATE TABLE work_items (
    id                  TEXT   PRIMARY KEY,
    environment_id      TEXT   NOT NULL,
    session_id          TEXT   NOT NULL REFERENCES sessions (id),
    state               TEXT   NOT NULL,  -- queued | starting | active | stopping | stopped
    metadata            TEXT   NOT NULL,  -- JSON object of strings
    created_at          BIGINT NOT NULL,
    delivered_at        BIGINT,           -- last handed out by a poll (re-delivered if not acked)
    worker_id           TEXT,             -- Anthropic-Worker-ID of that poll
    acknowledged_at     BIGINT,
    started_at          BIGINT,           -- first heartbeat
    latest_heartbeat_at BIGINT,
    heartbeat           TEXT,             -- the opaque last_heartbeat the next beat must present
    ttl_ms              BIGINT,
    lease_expires_at    BIGINT,
    stop_requested_at   BIGINT,
    stopped_at          BIGINT
);
CREATE UNIQUE INDEX work_items_live_per_session ON work_items (session_id) WHERE state <> 'stopped';
CREATE INDEX work_items_by_environment ON work_items (environment_id, created_at, id);
CREATE INDEX work_items_by_lease ON work_items (lease_expires_at) WHERE state <> 'stopped';

-- Who polled recently (work stats' workers_polling).
CREATE TABLE work_pollers (
    environment_id TEXT   NOT NULL,
    worker_id      TEXT   NOT NULL,
    polled_at      BIGINT NOT NULL,
    PRIMARY KEY (environment_id, worker_id)
);
