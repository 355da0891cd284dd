-- 0001: the dispatch core.
--
-- Adds the catalog (agents with immutable versions, environments), sessions with their
-- frozen snapshot, the per-session event log, the run queue with leases, and host liveness.
--
-- Conventions (shared with migrations/postgres): ids and JSON documents are TEXT; every
-- time is BIGINT milliseconds taken from the database clock inside the writing transaction,
-- so leases and event times agree across processes. Nothing is ever hard-deleted here:
-- sessions and environments get tombstones (deleted_at), because a session row must outlive
-- its delete long enough for open streams to read its final `session_deleted` event, and an
-- environment row must outlive every session that references it (the foreign key below is
-- deliberately RESTRICT, never CASCADE).

CREATE TABLE agents (
    id          TEXT    PRIMARY KEY,
    version     BIGINT  NOT NULL,            -- the current version
    created_at  BIGINT  NOT NULL,
    archived_at BIGINT
);
CREATE INDEX agents_by_created ON agents (created_at, id);

-- One immutable row per version; an update inserts version + 1.
CREATE TABLE agent_versions (
    agent_id    TEXT    NOT NULL REFERENCES agents (id),
    version     BIGINT  NOT NULL,
    spec        TEXT    NOT NULL,
    created_at  BIGINT  NOT NULL,
    PRIMARY KEY (agent_id, version)
);

CREATE TABLE environments (
    id          TEXT    PRIMARY KEY,
    spec        TEXT    NOT NULL,
    created_at  BIGINT  NOT NULL,
    updated_at  BIGINT  NOT NULL,
    archived_at BIGINT,
    deleted_at  BIGINT
);
CREATE INDEX environments_by_created ON environments (created_at, id);

CREATE TABLE sessions (
    id             TEXT    PRIMARY KEY,
    environment_id TEXT    NOT NULL REFERENCES environments (id) ON DELETE RESTRICT,
    agent_id       TEXT    NOT NULL,
    agent_version  BIGINT  NOT NULL,
    snapshot       TEXT    NOT NULL,         -- frozen agent version, requirements, resources
    title          TEXT,
    metadata       TEXT    NOT NULL,
    status         TEXT    NOT NULL,         -- idle | running | rescheduling | terminated
    pending        TEXT    NOT NULL,         -- JSON array of pending actions
    env_state      TEXT    NOT NULL,         -- none | realized | hibernated | released
    env_host       TEXT,                     -- where the environment was realized
    last_seq       BIGINT  NOT NULL,         -- seq of the last event; the append counter
    created_at     BIGINT  NOT NULL,
    updated_at     BIGINT  NOT NULL,
    archived_at    BIGINT,
    deleted_at     BIGINT
);
CREATE INDEX sessions_by_created ON sessions (created_at, id);
CREATE INDEX sessions_by_environment ON sessions (environment_id);

-- The event log. (session_id, seq) is the primary key, so a duplicate seq cannot exist;
-- seqs are taken from sessions.last_seq under the session's write lock, so none is skipped.
CREATE TABLE events (
    session_id TEXT    NOT NULL REFERENCES sessions (id),
    seq        BIGINT  NOT NULL,
    id         TEXT    NOT NULL UNIQUE,
    kind       TEXT    NOT NULL,
    payload    TEXT    NOT NULL,
    created_at BIGINT  NOT NULL,
    run_id     TEXT,                         -- the run that committed it; NULL for client input
    epoch      BIGINT,                       -- the lease epoch it was committed under
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE runs (
    id               TEXT    PRIMARY KEY,
    session_id       TEXT    NOT NULL REFERENCES sessions (id),
    state            TEXT    NOT NULL,       -- queued | running | completed | parked | cancelled | failed | indeterminate
    backend          TEXT    NOT NULL,       -- native | acp:NAME | a2a:NAME
    provider         TEXT,                   -- sandbox provider needed, NULL if none
    lease_owner      TEXT,
    lease_epoch      BIGINT  NOT NULL DEFAULT 0,
    lease_expires_at BIGINT,
    crash_count      BIGINT  NOT NULL DEFAULT 0,
    attempt          BIGINT  NOT NULL DEFAULT 0,
    available_at     BIGINT  NOT NULL,
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
    started          BOOLEAN NOT NULL DEFAULT FALSE,
    input_seq        BIGINT,                 -- the session's last seq when first claimed: the
                                             -- inputs this run answers (later ones are the next run's)
    created_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL
);
-- At most one running run per session, whatever the claim code does.
CREATE UNIQUE INDEX runs_one_running_per_session ON runs (session_id) WHERE state = 'running';
CREATE INDEX runs_by_session ON runs (session_id, state);
CREATE INDEX runs_due ON runs (state, available_at);

-- Liveness of the hosts Workers run on; a session environment realized on a host that stops
-- heartbeating is lost, never silently recreated elsewhere.
CREATE TABLE hosts (
    id           TEXT   PRIMARY KEY,
    last_seen_at BIGINT NOT NULL
);
