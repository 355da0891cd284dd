-- 0010: custom skills (docs/adr/0017).
--
-- A skill is a name and a list of immutable versions; each version's files (at most a few
-- MiB in all) are stored with it, written in the version's own transaction.

CREATE TABLE skills (
    id                TEXT   PRIMARY KEY,
    display_name      TEXT   NOT NULL,
    name              TEXT   NOT NULL,
    latest_version_id TEXT   NOT NULL,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL
);

CREATE INDEX skills_by_created ON skills (created_at, id);

CREATE TABLE skill_versions (
    id          TEXT   PRIMARY KEY,
    skill_id    TEXT   NOT NULL,
    name        TEXT   NOT NULL,
    description TEXT   NOT NULL,
    created_at  BIGINT NOT NULL
);

CREATE INDEX skill_versions_by_skill ON skill_versions (skill_id, created_at, id);

CREATE TABLE skill_files (
    version_id TEXT    NOT NULL,
    path       TEXT    NOT NULL,
    executable BOOLEAN NOT NULL,
    bytes      BLOB   NOT NULL,
    PRIMARY KEY (version_id, path)
);
