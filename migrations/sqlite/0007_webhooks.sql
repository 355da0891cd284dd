-- 0007: webhooks (docs/adr/0013).
--
-- Endpoints, from the config file (origin 'config', written at start) and from the API
-- (origin 'api'). The signing secret is sealed with the gateway's secret key, like the
-- credentials of push configs.
--
-- event_feed is the durable hand-over between a commit and its webhook deliveries: the
-- transaction that appends a lifecycle event (a turn's start or end, a termination, a
-- connection change or request) also inserts its row here, while any endpoint is enabled;
-- the webhook feeder turns rows into outbox deliveries and deletes them in one transaction,
-- so an acknowledged event is delivered at least once and never fanned out twice.

CREATE TABLE webhook_endpoints (
    id                   TEXT   PRIMARY KEY,
    origin               TEXT   NOT NULL,  -- config | api
    url                  TEXT   NOT NULL,
    secret               TEXT   NOT NULL,  -- sealed
    event_types          TEXT   NOT NULL,  -- JSON array; empty: every type
    description          TEXT,
    status               TEXT   NOT NULL,  -- enabled | disabled
    consecutive_failures BIGINT NOT NULL,
    created_at           BIGINT NOT NULL,
    disabled_at          BIGINT
);

CREATE TABLE event_feed (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT   NOT NULL,
    event_id   TEXT   NOT NULL
);
