-- 0011: the trace context of the request that queued a run.
--
-- A turn runs later than the request that admitted it, maybe in another process, so the
-- W3C `traceparent` / `tracestate` of that request travel with the run: the Worker that
-- claims it opens the turn's span under them and one trace shows request, turn, model and
-- remote calls together. NULL when the request was not traced (telemetry off, the common
-- case): nothing is written then. The values are opaque here; the store never reads them,
-- and no index is needed (they are only read back with the run they belong to).
ALTER TABLE runs ADD COLUMN traceparent TEXT;
ALTER TABLE runs ADD COLUMN tracestate TEXT;
