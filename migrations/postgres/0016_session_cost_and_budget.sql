-- 0016: a session's list cost and its budget (issue 32).
--
-- The list cost of its model requests (in millionths of a US dollar) and the number of
-- requests whose model has no list price are summed with the token counters of 0015, by the
-- same update. `budget_max_micros` is the spend ceiling set at creation (NULL: uncapped);
-- the native loop reads it before every model request.

ALTER TABLE sessions ADD COLUMN usage_list_cost_micros BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN usage_unpriced_requests BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN budget_max_micros BIGINT;
