"""List limits (ADR 0007 §3): defaults 20 (agents, agent versions, environments, sessions) and
100 (events); maxima 100 and 1000; anything outside 1..max is a 400."""

from __future__ import annotations

import anthropic
import pytest

from helpers import check_error, raw_page


def lists(client, agent_id: str, session_id: str) -> dict:
    """name -> (raw list call taking **kwargs, item kind, sessions-style prev_page, max limit)."""
    return {
        "agents": (client.beta.agents.with_raw_response.list, "agent", False, 100),
        "agent versions": (lambda **kw: client.beta.agents.versions.with_raw_response.list(agent_id, **kw),
                           "agent", False, 100),
        "environments": (client.beta.environments.with_raw_response.list, "environment", False, 100),
        "sessions": (client.beta.sessions.with_raw_response.list, "session", True, 100),
        "events": (lambda **kw: client.beta.sessions.events.with_raw_response.list(session_id, **kw),
                   "event", False, 1000),
    }


@pytest.fixture
def targets(client, make_agent, make_session):
    agent = make_agent()
    session = make_session(agent=agent)
    return lists(client, agent.id, session.id)


@pytest.mark.parametrize("name", ["agents", "agent versions", "environments", "sessions", "events"])
def test_limit_bounds(targets, name):
    call, kind, prev, maximum = targets[name]
    body = raw_page(call(limit=maximum), kind, prev_page=prev)
    assert len(body["data"]) <= maximum
    raw_page(call(limit=1), kind, prev_page=prev)
    for bad in (0, maximum + 1):
        with pytest.raises(anthropic.BadRequestError) as e:
            call(limit=bad)
        check_error(e.value, 400, "invalid_request_error")


def count(call, kind: str, prev: bool, maximum: int) -> int:
    total, page = 0, None
    while True:
        body = raw_page(call(limit=maximum, **({"page": page} if page else {})), kind, prev_page=prev)
        total += len(body["data"])
        page = body["next_page"]
        if page is None:
            return total


@pytest.mark.parametrize("name", ["agents", "environments", "sessions"])
def test_default_limit_is_20(client, make_agent, make_env, targets, name):
    call, kind, prev, maximum = targets[name]
    # Make sure there are more than 20 live items of this kind.
    for _ in range(max(0, 21 - count(call, kind, prev, maximum))):
        if name == "agents":
            make_agent()
        elif name == "environments":
            make_env()
        else:
            client.beta.sessions.create(agent=client.beta.agents.create(name="n", model="claude-opus-4-7").id,
                                        environment_id=make_env().id)
    body = raw_page(call(), kind, prev_page=prev)
    assert len(body["data"]) == 20 and body["next_page"] is not None


@pytest.mark.parametrize("name", ["agents", "agent versions", "environments", "sessions", "events"])
def test_foreign_cursor_is_400(targets, name):
    call, _, _, _ = targets[name]
    with pytest.raises(anthropic.BadRequestError) as e:
        call(page="not-a-cursor-we-issued")
    check_error(e.value, 400, "invalid_request_error")
