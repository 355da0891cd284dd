-- 0013: one feed for every outbound notification channel (issue 29, docs/adr/0023).
--
-- event_feed (0007) carried only the lifecycle events handed to webhooks. It now carries a
-- channel: 'lifecycle' for the lifecycle feed (what every row written so far is), or the name
-- of a channel that subscribed a session. A channel takes its rows, turns them into outbox
-- deliveries and deletes them in one transaction (`Feeds::settle_feed`), with the adapter
-- state those deliveries explain, so an event committed is queued at least once and never
-- twice by two settlements.
--
-- feed_subscriptions: a channel following one session's events for one key of its own (A2A
-- push: one row per unfinished task, key = the task id), and how far that key has been fed
-- (after_seq). Written with the admission that creates the key; deleted by the settlement
-- that ends it. While a session has a subscription, the transaction that appends its events
-- also writes one feed row per subscribed channel and event.
--
-- sessions.feed_subscribed: set (1) once any subscription of the session is written, and never
-- cleared. The update that advances a session's log returns it, so a commit of a session
-- nobody subscribed to writes no feed row and reads nothing more: the hot path stays one
-- statement. Sticky because clearing it would race with a new subscription; a set flag with
-- no subscription left costs one INSERT ... SELECT that inserts nothing.
--
-- The cursors of the per-task push feeder (documents of namespace 'a2a.feed', body
-- {"sessionId", "afterSeq"}, held under document leases) become subscriptions of channel
-- 'a2a_push' here, and the events after each cursor are fed, so nothing a cursor had not
-- reached is lost and nothing it had passed is sent again. A cursor without a readable
-- afterSeq starts at 0 (its task is refolded from its start: updates may repeat, none is
-- lost); one whose session row is missing is dropped with the others (a deleted session's
-- subscription ends at its first feed). The lease columns of 0005 stay (dropping a column
-- rebuilds the table on SQLite) but nothing writes them any more.

ALTER TABLE event_feed ADD COLUMN channel TEXT NOT NULL DEFAULT 'lifecycle';
CREATE INDEX event_feed_by_channel ON event_feed (channel, id);

ALTER TABLE sessions ADD COLUMN feed_subscribed BIGINT NOT NULL DEFAULT 0;

CREATE TABLE feed_subscriptions (
    channel    TEXT   NOT NULL,
    key        TEXT   NOT NULL,
    session_id TEXT   NOT NULL,
    after_seq  BIGINT NOT NULL,  -- events up to this seq have been fed to the key
    created_at BIGINT NOT NULL,
    PRIMARY KEY (channel, key)
);
CREATE INDEX feed_subscriptions_by_session ON feed_subscriptions (session_id);

INSERT INTO feed_subscriptions (channel, key, session_id, after_seq, created_at)
SELECT 'a2a_push', d.key, json_extract(d.body, '$.sessionId'),
       COALESCE(CAST(json_extract(d.body, '$.afterSeq') AS BIGINT), 0), d.created_at
FROM documents d JOIN sessions s ON s.id = json_extract(d.body, '$.sessionId')
WHERE d.namespace = 'a2a.feed';

UPDATE sessions SET feed_subscribed = 1 WHERE id IN (SELECT session_id FROM feed_subscriptions);

INSERT INTO event_feed (channel, session_id, event_id)
SELECT 'a2a_push', e.session_id, e.id FROM events e
WHERE e.seq > (SELECT MIN(f.after_seq) FROM feed_subscriptions f WHERE f.session_id = e.session_id)
ORDER BY e.session_id, e.seq;

DELETE FROM documents WHERE namespace = 'a2a.feed';
