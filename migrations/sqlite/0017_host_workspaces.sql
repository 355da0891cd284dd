-- 0017: which workspaces a host id's processes keep (issue 33).
--
-- Sessions realized on a host are pinned to its id; a process claims the id at start with the
-- directory its session workspaces live in. Two live processes that share an id (the default
-- is the hostname) but not that directory would run each other's turns on workspaces they do
-- not have, so the second is refused at start, naming the clash. NULL: claimed before this.

ALTER TABLE hosts ADD COLUMN workspaces TEXT;
