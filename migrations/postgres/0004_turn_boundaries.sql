-- 0004: every `turn_started` event names its run's input boundary.
--
-- The boundary (`inputs_through`: the last seq of the inputs the turn answers) became part of
-- `turn_started` after some turns had been stored without it. The rule that assigns inputs to
-- turns (gateway_core::turn) now relies on it, so older events get the boundary they meant:
-- everything committed before them (`seq - 1`), which is what a turn started from then
-- answered. Nothing else changes; gateways older than this migration must not write to the
-- same database afterwards (their turn starts would lack the field again).
UPDATE events
SET payload = jsonb_set(payload::jsonb, '{inputs_through}', to_jsonb(seq - 1))::text
WHERE kind = 'turn_started' AND jsonb_typeof(payload::jsonb -> 'inputs_through') IS DISTINCT FROM 'number';
