-- 0014: vaults and their credentials (docs/adr/0024).
--
-- A credential's secret is sealed with the gateway's secret key, like push credentials and
-- webhook secrets; the rest of it (its server, its kind, how it is refreshed) is its spec.
-- server_url is the normalized URL a session's MCP servers are matched by: a vault holds one
-- live credential per server. Credentials are deleted with their vault, in its transaction.

CREATE TABLE vaults (
    id          TEXT   PRIMARY KEY,
    spec        TEXT   NOT NULL,  -- display name and metadata (JSON)
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    archived_at BIGINT
);

CREATE INDEX vaults_by_created ON vaults (created_at, id);

CREATE TABLE vault_credentials (
    id          TEXT   PRIMARY KEY,
    vault_id    TEXT   NOT NULL,
    server_url  TEXT   NOT NULL,
    spec        TEXT   NOT NULL,  -- display name, metadata, auth without its secret (JSON)
    secret      TEXT   NOT NULL,  -- sealed
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    archived_at BIGINT
);

CREATE INDEX vault_credentials_by_vault ON vault_credentials (vault_id, created_at, id);
CREATE UNIQUE INDEX vault_credentials_one_live_per_server
    ON vault_credentials (vault_id, server_url) WHERE archived_at IS NULL;
