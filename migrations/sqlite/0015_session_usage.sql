-- 0015: a session's cumulative model usage (issue 32).
--
-- The transaction that appends a session's events adds the usage of the model requests they
-- end (`model_request_ended`) to these counters, in the same update that advances the
-- session's log: the session object reads its usage from its own row, and a crash loses no
-- request that was committed. Sessions from before count from zero.

ALTER TABLE sessions ADD COLUMN usage_input_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN usage_output_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN usage_cache_read_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN usage_cache_write_tokens BIGINT NOT NULL DEFAULT 0;
