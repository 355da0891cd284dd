-- 0008: an index for the claim's second half, running runs whose lease expired.
--
-- Without it the claim query visited every running run to compare its lease expiry, so each
-- claim cost time in proportion to the turns in flight (0.5 ms of the single SQLite writer's
-- time at 100 in flight, measured; a process holds thousands: ADR 0012). With it, the expired
-- ones are a range of the index, usually empty.
CREATE INDEX runs_expiring ON runs (state, lease_expires_at);
