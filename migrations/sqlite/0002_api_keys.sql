-- 0002: API keys for the HTTP surfaces.
--
-- Only a SHA-256 hash of each key is stored: keys are 190 random bits, so a plain hash is
-- enough to make a leaked table useless, and lookups stay a single indexed equality. The
-- secret itself is shown once, by `gateway keys create`, and never stored or logged.
-- Revocation keeps the row (revoked_at) so audits can still name the key that was used.

CREATE TABLE api_keys (
    id         TEXT   PRIMARY KEY,
    name       TEXT   NOT NULL,
    hash       TEXT   NOT NULL UNIQUE,   -- hex SHA-256 of the key
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
