"""Sessions: the three agent forms, retrieve, list filters and cursors, archive, delete and guards,
initial_events."""

from __future__ import annotations

import anthropic
import pytest

from conftest import Watch, user_message, wait_status
from helpers import check_error, raw, raw_page, text_of

SLEEP = 'tool:bash {"command": "sleep 30"}'


def test_create_with_agent_id_metadata_and_title(client, make_agent, make_env):
    agent, env = make_agent(system="sys"), make_env()
    r = client.beta.sessions.with_raw_response.create(
        agent=agent.id, environment_id=env.id, metadata={"ticket": "42"}, title="compat title")
    body = raw(r, "session")
    assert body["status"] == "idle"
    assert body["environment_id"] == env.id
    assert body["metadata"] == {"ticket": "42"} and body["title"] == "compat title"
    assert body["agent"]["id"] == agent.id and body["agent"]["version"] == 1 and body["agent"]["system"] == "sys"
    assert body["archived_at"] is None
    assert body["vault_ids"] == [] and body["resources"] == []
    # Extension: nothing realized yet on an on_tool_use environment.
    assert body["environment_state"] == "none"
    got = raw(client.beta.sessions.with_raw_response.retrieve(body["id"]), "session")
    assert got["id"] == body["id"] and got["status"] == "idle" and got["title"] == "compat title"
    assert got["agent"] == body["agent"]


def test_update_title_and_metadata(client, make_session):
    s = make_session(metadata={"keep": "1", "drop": "2"}, title="before")
    body = raw(client.beta.sessions.with_raw_response.update(
        s.id, title="after", metadata={"drop": None, "new": "3"}), "session")
    assert body["title"] == "after" and body["metadata"] == {"keep": "1", "new": "3"}
    got = raw(client.beta.sessions.with_raw_response.retrieve(s.id), "session")
    assert got["title"] == "after" and got["metadata"] == {"keep": "1", "new": "3"}


def test_create_pinned_to_a_version(client, make_agent, make_session):
    agent = make_agent(system="v1")
    client.beta.agents.update(agent.id, version=1, system="v2")
    latest = make_session(agent=agent)
    assert latest.agent.version == 2 and latest.agent.system == "v2"
    pinned = make_session(agent=agent, agent_ref={"type": "agent", "id": agent.id, "version": 1})
    assert pinned.agent.version == 1 and pinned.agent.system == "v1"
    body = raw(client.beta.sessions.with_raw_response.retrieve(pinned.id), "session")
    assert body["agent"]["version"] == 1 and body["agent"]["system"] == "v1"
    assert [x.id for x in client.beta.sessions.list(agent_id=agent.id, agent_version=1)] == [pinned.id]
    assert [x.id for x in client.beta.sessions.list(agent_id=agent.id, agent_version=2)] == [latest.id]


def test_create_with_overrides(client, make_agent, make_session):
    agent = make_agent(system="original")
    s = make_session(agent=agent, agent_ref={"type": "agent_with_overrides", "id": agent.id, "system": "overridden"})
    body = raw(client.beta.sessions.with_raw_response.retrieve(s.id), "session")
    assert body["agent"]["id"] == agent.id
    assert body["agent"]["system"] == "overridden"
    # The agent itself is unchanged.
    assert client.beta.agents.retrieve(agent.id).system == "original"


def test_bad_agent_references_are_rejected(client, make_agent, make_env):
    agent, env = make_agent(), make_env()
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.sessions.create(
            agent={"type": "agent_with_overrides", "id": agent.id, "model": None}, environment_id=env.id)
    check_error(e.value, 400, "invalid_request_error", "agent_model_required")
    with pytest.raises(anthropic.NotFoundError) as e:
        client.beta.sessions.create(agent={"type": "agent", "id": agent.id, "version": 7}, environment_id=env.id)
    check_error(e.value, 404, "not_found_error")
    with pytest.raises(anthropic.NotFoundError) as e:
        client.beta.sessions.create(agent="agent_0000000000000000000000", environment_id=env.id)
    check_error(e.value, 404, "not_found_error", "agent_not_found")


def test_list_filters_order_and_cursors(client, make_agent, make_env, make_session):
    agent, other, env = make_agent(), make_agent(), make_env()
    s1, s2, s3 = (make_session(agent=agent, env=env) for _ in range(3))
    foreign = make_session(agent=other, env=env)

    ids = [s.id for s in client.beta.sessions.list(agent_id=agent.id)]
    assert ids == [s3.id, s2.id, s1.id], "default order is created_at desc"
    asc = raw_page(client.beta.sessions.with_raw_response.list(agent_id=agent.id, order="asc"), "session",
                   prev_page=True)
    assert [s["id"] for s in asc["data"]] == [s1.id, s2.id, s3.id]
    assert foreign.id not in ids

    newer = [s.id for s in client.beta.sessions.list(agent_id=agent.id, created_at_gte=s2.created_at)]
    assert sorted(newer) == sorted([s2.id, s3.id])
    older = [s.id for s in client.beta.sessions.list(agent_id=agent.id, created_at_lt=s2.created_at)]
    assert older == [s1.id]

    # limit=1 with next_page / prev_page (ADR 0007 §4: prev_page null on the first page).
    first = raw_page(client.beta.sessions.with_raw_response.list(agent_id=agent.id, limit=1), "session",
                     prev_page=True)
    assert [s["id"] for s in first["data"]] == [s3.id]
    assert first["prev_page"] is None and first["next_page"] is not None
    second = raw_page(client.beta.sessions.with_raw_response.list(agent_id=agent.id, limit=1,
                                                                  page=first["next_page"]), "session", prev_page=True)
    assert [s["id"] for s in second["data"]] == [s2.id]
    assert second["prev_page"] is not None
    back = raw_page(client.beta.sessions.with_raw_response.list(agent_id=agent.id, limit=1,
                                                                page=second["prev_page"]), "session", prev_page=True)
    assert [s["id"] for s in back["data"]] == [s3.id]
    walked = [s.id for s in client.beta.sessions.list(agent_id=agent.id, limit=1)]
    assert walked == [s3.id, s2.id, s1.id]

    # A cursor is tied to its order (ADR 0007 §4).
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.sessions.list(agent_id=agent.id, limit=1, order="asc", page=first["next_page"])
    check_error(e.value, 400, "invalid_request_error")


def test_list_by_status_and_archived(client, make_agent, make_env, make_session):
    agent, env = make_agent(), make_env()
    idle, busy, archived = (make_session(agent=agent, env=env) for _ in range(3))
    raw(client.beta.sessions.with_raw_response.archive(archived.id), "session")
    with Watch(client, busy.id) as w:
        w.send(user_message(SLEEP))
        w.until(lambda e: e.type == "agent.tool_use")
        running = [s.id for s in client.beta.sessions.list(agent_id=agent.id, statuses=["running"])]
        idle_ids = [s.id for s in client.beta.sessions.list(agent_id=agent.id, statuses=["idle"])]
        w.send({"type": "user.interrupt"})
        w.until_stop()
    assert running == [busy.id]
    assert idle_ids == [idle.id], "archived sessions are hidden, running ones filtered out"
    everything = [s.id for s in client.beta.sessions.list(agent_id=agent.id, include_archived=True)]
    assert sorted(everything) == sorted([idle.id, busy.id, archived.id])
    both = [s.id for s in client.beta.sessions.list(agent_id=agent.id, statuses=["idle", "running"])]
    assert sorted(both) == sorted([idle.id, busy.id])


def test_archive_blocks_sends(client, make_session):
    s = make_session()
    body = raw(client.beta.sessions.with_raw_response.archive(s.id), "session")
    assert body["archived_at"] is not None and body["status"] == "idle"
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.sessions.events.send(s.id, events=[user_message("hi")])
    check_error(e.value, 400, "invalid_request_error", "session_archived")


def test_running_session_cannot_be_archived_or_deleted(client, make_session):
    s = make_session()
    with Watch(client, s.id) as w:
        w.send(user_message(SLEEP))
        w.until(lambda e: e.type == "agent.tool_use")
        assert raw(client.beta.sessions.with_raw_response.retrieve(s.id), "session")["status"] == "running"
        with pytest.raises(anthropic.ConflictError) as e:
            client.beta.sessions.delete(s.id)
        check_error(e.value, 409, "conflict_error", "session_running")
        with pytest.raises(anthropic.ConflictError) as e:
            client.beta.sessions.archive(s.id)
        check_error(e.value, 409, "conflict_error", "session_running")
        w.send({"type": "user.interrupt"})
        w.until_stop()
    wait_status(client, s.id, "idle")
    deleted = raw(client.beta.sessions.with_raw_response.delete(s.id), "session_deleted")
    assert deleted == {"id": s.id, "type": "session_deleted"}
    with pytest.raises(anthropic.NotFoundError) as e:
        client.beta.sessions.retrieve(s.id)
    check_error(e.value, 404, "not_found_error", "session_not_found")
    with pytest.raises(anthropic.NotFoundError):
        client.beta.sessions.events.list(s.id)


def test_delete_ends_open_streams_with_session_deleted(client, make_session):
    s = make_session()
    with Watch(client, s.id) as w:
        raw(client.beta.sessions.with_raw_response.delete(s.id), "session_deleted")
        got = w.until(lambda e: e.type == "session.deleted", timeout=10)
        assert got[-1].type == "session.deleted"
        rest = list(w._iter)  # ADR 0007 §7: the stream ends after session.deleted
        assert rest == []


def test_initial_events_start_the_session_running(client, make_agent, make_env):
    agent, env = make_agent(), make_env()
    r = client.beta.sessions.with_raw_response.create(
        agent=agent.id, environment_id=env.id, initial_events=[user_message("hello from create")])
    body = raw(r, "session")
    assert body["status"] == "running"
    wait_status(client, body["id"], "idle")
    page = raw_page(client.beta.sessions.events.with_raw_response.list(body["id"]), "event")
    kinds = [e["type"] for e in page["data"]]
    assert kinds[0] == "user.message" and text_of(page["data"][0]) == "hello from create"
    messages = [e for e in page["data"] if e["type"] == "agent.message"]
    assert [text_of(m) for m in messages] == ["echo: hello from create"]
    assert kinds[-1] == "session.status_idle" and page["data"][-1]["stop_reason"] == {"type": "end_turn"}
