-- 0005: leases on documents, kept on the database clock.
--
-- An adapter that works through a set of documents from several gateway processes (the A2A
-- push feeder and its per-task cursors) needs to know which process holds which document.
-- Until now the holder and its expiry lived inside the document body, written with the
-- process clock, so two processes whose clocks drift could both believe they held a cursor.
-- These columns hold the lease instead: `Documents::claim_documents` and
-- `Documents::renew_document` compute the expiry from the database clock in the transaction
-- that checks the holder, like the run leases of 0001.
--
-- Deliberately no index: claims scan one namespace's key range of the primary key, and the
-- lease predicate only filters that range.

ALTER TABLE documents ADD COLUMN lease_owner TEXT;
ALTER TABLE documents ADD COLUMN lease_expires_at BIGINT;
