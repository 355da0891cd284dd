"""events.list: superset of the stream, types[] filter, order, limit and pagination; bad filters."""

from __future__ import annotations

from datetime import datetime

import anthropic
import pytest

from conftest import Watch, run_turn, user_message
from helpers import check_error, raw, raw_page, text_of

WRITE = 'tool:write {"file_path": "notes.txt", "content": "hello"}'


@pytest.fixture
def busy_session(client, make_session):
    """A session with two finished turns: a tool turn and an echo turn (>= 14 events)."""
    s = make_session()
    first = run_turn(client, s.id, WRITE)
    second = run_turn(client, s.id, "and now?")
    return s, first.events + second.events


def list_all(client, session_id: str, **kwargs) -> list[dict]:
    out, page, pages = [], None, 0
    while True:
        args = dict(kwargs, page=page) if page else kwargs
        body = raw_page(client.beta.sessions.events.with_raw_response.list(session_id, **args), "event")
        if "limit" in kwargs:
            assert len(body["data"]) <= kwargs["limit"]
        out.extend(body["data"])
        page = body["next_page"]
        pages += 1
        assert pages < 200
        if page is None:
            return out


def test_list_is_a_superset_of_the_stream(client, busy_session):
    s, streamed = busy_session
    # A local tool ran, so the session's environment was realized (extension, ADR 0007 §14).
    assert raw(client.beta.sessions.with_raw_response.retrieve(s.id), "session")["environment_state"] == "realized"
    listed = list_all(client, s.id)
    ids = [e["id"] for e in listed]
    assert len(ids) == len(set(ids))
    streamed_ids = [e.id for e in streamed]
    assert [i for i in ids if i in set(streamed_ids)] == streamed_ids
    # Same event, same content: the list item and the stream frame agree.
    by_id = {e["id"]: e for e in listed}
    for ev in streamed:
        item = by_id[ev.id]
        assert item["type"] == ev.type
        if ev.type == "agent.message":
            assert text_of(item) == text_of(ev)
    tool_uses = [e for e in listed if e["type"] == "agent.tool_use"]
    assert len(tool_uses) == 1 and tool_uses[0]["name"] == "write"
    assert tool_uses[0]["input"] == {"file_path": "notes.txt", "content": "hello"}
    results = [e for e in listed if e["type"] == "agent.tool_result"]
    assert len(results) == 1 and results[0]["tool_use_id"] == tool_uses[0]["id"] and not results[0].get("is_error")
    assert [text_of(e) for e in listed if e["type"] == "agent.message"][-1] == "echo: and now?"


def test_types_filter(client, busy_session):
    s, _ = busy_session
    listed = list_all(client, s.id)
    only = list_all(client, s.id, types=["agent.message"])
    assert only and all(e["type"] == "agent.message" for e in only)
    assert [e["id"] for e in only] == [e["id"] for e in listed if e["type"] == "agent.message"]
    two = list_all(client, s.id, types=["session.status_idle", "user.message"])
    assert [e["id"] for e in two] == [e["id"] for e in listed if e["type"] in ("session.status_idle", "user.message")]
    assert [e["type"] for e in two] == ["user.message", "session.status_idle"] * 2
    # The SDK's typed pages agree.
    assert [e.id for e in client.beta.sessions.events.list(s.id, types=["agent.message"])] == [e["id"] for e in only]


def test_order_desc_and_limit_pagination(client, busy_session):
    s, _ = busy_session
    asc = list_all(client, s.id)
    assert len(asc) >= 14
    desc = list_all(client, s.id, order="desc")
    assert [e["id"] for e in desc] == [e["id"] for e in reversed(asc)]
    paged = list_all(client, s.id, limit=3)
    assert [e["id"] for e in paged] == [e["id"] for e in asc], "limit=3 pages: every event once, in order"
    paged_desc = list_all(client, s.id, limit=4, order="desc")
    assert [e["id"] for e in paged_desc] == [e["id"] for e in desc]
    auto = [e.id for e in client.beta.sessions.events.list(s.id, limit=2)]
    assert auto == [e["id"] for e in asc]
    # Default limit 100 covers this session in one page.
    body = raw_page(client.beta.sessions.events.with_raw_response.list(s.id), "event")
    assert len(body["data"]) == len(asc) and body["next_page"] is None


def test_cursor_is_tied_to_its_order(client, busy_session):
    s, _ = busy_session
    first = raw_page(client.beta.sessions.events.with_raw_response.list(s.id, limit=2), "event")
    assert first["next_page"] is not None
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.sessions.events.list(s.id, limit=2, order="desc", page=first["next_page"])
    check_error(e.value, 400, "invalid_request_error")


@pytest.mark.parametrize("limit", [0, 1001])
def test_limit_out_of_range_is_400(client, make_session, limit):
    s = make_session()
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.sessions.events.list(s.id, limit=limit)
    check_error(e.value, 400, "invalid_request_error")


def test_limit_maximum_is_accepted(client, make_session):
    s = make_session()
    body = raw_page(client.beta.sessions.events.with_raw_response.list(s.id, limit=1000), "event")
    assert body["data"] == [] and body["next_page"] is None, "session create emits no event (ADR 0007 §8)"


def test_unknown_types_value_is_400_naming_it(client, make_session):
    s = make_session()
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.sessions.events.list(s.id, types=["agent.message", "agent.bogus_kind"])  # type: ignore[list-item]
    body = check_error(e.value, 400, "invalid_request_error")
    assert "agent.bogus_kind" in body["error"]["message"]


def test_unknown_event_deltas_value_is_400_naming_it(client, make_session):
    s = make_session()
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.sessions.events.stream(s.id, event_deltas=["agent.tool_use"])  # type: ignore[list-item]
    body = check_error(e.value, 400, "invalid_request_error")
    assert "agent.tool_use" in body["error"]["message"]


def test_send_echo_ids_match_the_log(client, make_session):
    s = make_session()
    with Watch(client, s.id) as w:
        echoed = w.send(user_message("echo me"))
        w.until_stop()
    listed = list_all(client, s.id, types=["user.message"])
    assert [e["id"] for e in listed] == [echoed[0]["id"]]
    assert text_of(listed[0]) == "echo me"


def test_created_at_filters_compare_processed_at(client, busy_session):
    s, _ = busy_session
    listed = list_all(client, s.id)
    at = [datetime.fromisoformat(e["processed_at"]) for e in listed]
    second_turn = [i for i, e in enumerate(listed) if e["type"] == "user.message"][1]
    t = listed[second_turn]["processed_at"]
    cut = datetime.fromisoformat(t)
    gte = list_all(client, s.id, created_at_gte=t)
    assert [e["id"] for e in gte] == [e["id"] for e, ts in zip(listed, at) if ts >= cut]
    assert listed[second_turn]["id"] in [e["id"] for e in gte]
    lt = list_all(client, s.id, created_at_lt=t)
    assert [e["id"] for e in lt] == [e["id"] for e, ts in zip(listed, at) if ts < cut]
    assert listed[0]["id"] in [e["id"] for e in lt]


def test_only_client_event_types_can_be_sent(client, make_session):
    s = make_session()
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.sessions.events.send(s.id, events=[{"type": "agent.message", "content": []}])  # type: ignore[list-item]
    check_error(e.value, 400, "invalid_request_error")
    assert list_all(client, s.id) == [], "a refused send commits nothing"
