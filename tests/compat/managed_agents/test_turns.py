"""Turns over the SDK stream: the plain turn, previews, custom tools, confirmations, interrupts."""

from __future__ import annotations

import time

import anthropic
import pytest
from anthropic.lib.sessions import accumulate_managed_agents_event
from anthropic.types.beta import BetaManagedAgentsSessionUsage

from conftest import TOOLSET, Watch, is_final_stop, run_turn, types, user_message, wait_status
from helpers import ID, check_error, raw, raw_page, text_of

LOOKUP = {"type": "custom", "name": "lookup", "description": "Looks a word up.",
          "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}
ASK_BASH = {"type": "agent_toolset_20260401",
            "configs": [{"name": "bash", "permission_policy": {"type": "always_ask"}}]}
SLEEP = 'tool:bash {"command": "sleep 30"}'
NOT_AN_EVENT = "sevt_0000000000000000000000"


def all_events(client, session_id: str) -> list[dict]:
    """Every event of the session, raw and validated, walking next_page."""
    out, page = [], None
    while True:
        kwargs = {"page": page} if page else {}
        body = raw_page(client.beta.sessions.events.with_raw_response.list(session_id, **kwargs), "event")
        out.extend(body["data"])
        page = body["next_page"]
        if page is None:
            return out


def test_streamed_turn(client, make_session):
    s = make_session()
    w = run_turn(client, s.id, "hello there")
    kinds = types(w.events)
    # ADR 0007 §8: the user.message (the send's echo, same id) first, then session.status_running,
    # before any model span or agent output.
    assert kinds[0] == "user.message" and w.events[0].id == w.sent[0]["id"]
    assert text_of(w.events[0]) == "hello there"
    assert kinds.count("session.status_running") == 1
    running = kinds.index("session.status_running")
    work = [i for i, k in enumerate(kinds) if k.startswith(("agent.", "span."))]
    assert work and running < work[0], kinds
    last = w.events[-1]
    assert last.type == "session.status_idle" and last.stop_reason.type == "end_turn"
    messages = w.of_type("agent.message")
    assert len(messages) >= 1 and text_of(messages[-1]) == "echo: hello there"
    # One model request span around the message.
    start, end = w.of_type("span.model_request_start"), w.of_type("span.model_request_end")
    assert len(start) == len(end) >= 1 and end[0].model_request_start_id == start[0].id
    assert kinds.index("span.model_request_start") < kinds.index("agent.message") < kinds.index(
        "span.model_request_end") < kinds.index("session.status_idle")
    ids = [e.id for e in w.events]
    assert all(ID["sevt"].fullmatch(i) for i in ids) and len(set(ids)) == len(ids)
    # events.list holds the same events, same ids, same order.
    listed = [e["id"] for e in all_events(client, s.id)]
    assert set(ids) <= set(listed)
    assert [i for i in listed if i in set(ids)] == ids
    body = raw(client.beta.sessions.with_raw_response.retrieve(s.id), "session")
    assert body["status"] == "idle"
    assert body["environment_state"] == "none", "no tool ran: on_tool_use realizes nothing"
    # The turn ends with the session's usage so far (just before its idle), which the
    # session object also carries, both in the SDK's strict shapes.
    spent = end[0].model_usage
    usage = w.of_type("session.usage")
    assert len(usage) == 1 and kinds.index("session.usage") == len(kinds) - 2, kinds
    assert (usage[0].usage.input_tokens, usage[0].usage.output_tokens) == (spent.input_tokens, spent.output_tokens)
    BetaManagedAgentsSessionUsage.model_validate(body["usage"], strict=True)
    assert (body["usage"]["input_tokens"], body["usage"]["output_tokens"]) == (spent.input_tokens, spent.output_tokens)
    # The session spans turns, and its usage adds up.
    again = run_turn(client, s.id, "second")
    assert [text_of(m) for m in again.of_type("agent.message")] == ["echo: second"]
    more = again.of_type("span.model_request_end")[0].model_usage
    total = again.of_type("session.usage")[0].usage
    assert total.input_tokens == spent.input_tokens + more.input_tokens
    assert total.output_tokens == spent.output_tokens + more.output_tokens
    body = raw(client.beta.sessions.with_raw_response.retrieve(s.id), "session")
    assert body["usage"]["output_tokens"] == total.output_tokens


def test_previews_fold_to_the_final_message(client, make_session):
    s = make_session()
    text = "a fairly long sentence so that the fake model streams it in several chunks " * 3
    w = run_turn(client, s.id, text, deltas=True)
    started: set[str] = set()
    finished: set[str] = set()
    deltas = 0
    acc = None
    before_final = None
    for ev in w.events:
        if ev.type == "event_start":
            assert ev.event.type == "agent.message"
            assert ev.event.id not in started, "one event_start per id"
            started.add(ev.event.id)
        elif ev.type == "event_delta":
            assert ev.event_id in started, "event_delta before its event_start"
            assert ev.event_id not in finished, "event_delta after the final agent.message"
            deltas += 1
        elif ev.type == "agent.message":
            assert ev.id in started, "the agent.message has the previewed id, started earlier"
            finished.add(ev.id)
            before_final = acc
        acc = accumulate_managed_agents_event(acc, ev)
    assert deltas >= 2
    final = w.of_type("agent.message")[-1]
    assert text_of(final) == f"echo: {text}"
    assert before_final is not None and before_final.id == final.id
    assert text_of(before_final) == text_of(final), "the deltas fold to the final text"
    assert acc is not None and acc.id == final.id and text_of(acc) == text_of(final)
    # Previews are stream-only: events.list has the final message only.
    assert [e["type"] for e in all_events(client, s.id) if e["id"] == final.id] == ["agent.message"]


def test_custom_tool_parks_and_resumes(client, make_agent, make_session):
    s = make_session(agent=make_agent(tools=[TOOLSET, LOOKUP]))
    with Watch(client, s.id) as w:
        w.send(user_message('custom:lookup {"q": "apples"}'))
        w.until(lambda e: e.type == "session.status_idle")
        uses = w.of_type("agent.custom_tool_use")
        assert len(uses) == 1 and uses[0].name == "lookup" and uses[0].input == {"q": "apples"}
        idle = w.events[-1]
        assert idle.stop_reason.type == "requires_action" and idle.stop_reason.event_ids == [uses[0].id]
        assert raw(client.beta.sessions.with_raw_response.retrieve(s.id), "session")["status"] == "idle"

        with pytest.raises(anthropic.ConflictError) as e:
            client.beta.sessions.events.send(s.id, events=[user_message("are you there?")])
        check_error(e.value, 409, "conflict_error", "session_requires_action")

        mark = len(w.events)
        w.send({"type": "user.custom_tool_result", "custom_tool_use_id": uses[0].id,
                "content": [{"type": "text", "text": "42 apples"}]})
        w.until(is_final_stop)
    after = w.events[mark:]
    kinds = types(after)
    assert kinds[0] == "user.custom_tool_result" and after[0].custom_tool_use_id == uses[0].id
    assert kinds.index("session.status_running") < kinds.index("agent.message")
    assert [text_of(m) for m in after if m.type == "agent.message"] == ["done: 42 apples"]
    assert after[-1].type == "session.status_idle" and after[-1].stop_reason.type == "end_turn"


def ask_bash(client, make_agent, make_session, command: str):
    s = make_session(agent=make_agent(tools=[ASK_BASH]))
    w = Watch(client, s.id)
    w.send(user_message(f'tool:bash {{"command": "{command}"}}'))
    w.until(lambda e: e.type == "session.status_idle")
    uses = w.of_type("agent.tool_use")
    assert len(uses) == 1 and uses[0].name == "bash" and uses[0].input == {"command": command}
    assert uses[0].evaluated_permission == "ask"
    idle = w.events[-1]
    assert idle.stop_reason.type == "requires_action" and idle.stop_reason.event_ids == [uses[0].id]
    assert not w.of_type("agent.tool_result"), "an always_ask tool ran before it was confirmed"
    return s, w, uses[0]


def test_always_ask_allow_runs_the_tool(client, make_agent, make_session):
    s, w, use = ask_bash(client, make_agent, make_session, "echo confirmed-run")
    with w:
        mark = len(w.events)
        w.send({"type": "user.tool_confirmation", "tool_use_id": use.id, "result": "allow"})
        w.until(is_final_stop)
    after = w.events[mark:]
    results = [e for e in after if e.type == "agent.tool_result"]
    assert len(results) == 1 and results[0].tool_use_id == use.id and not results[0].is_error
    assert "confirmed-run" in text_of(results[0])
    messages = [text_of(e) for e in after if e.type == "agent.message"]
    assert len(messages) == 1 and messages[0].startswith("done: ") and "confirmed-run" in messages[0]
    assert types(after).index("agent.tool_result") < types(after).index("agent.message")
    assert after[-1].stop_reason.type == "end_turn"

    # The id is no longer pending (ADR 0007 §5).
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.sessions.events.send(
            s.id, events=[{"type": "user.tool_confirmation", "tool_use_id": use.id, "result": "allow"}])
    check_error(e.value, 400, "invalid_request_error", "tool_use_not_pending")


def test_always_ask_deny_reports_the_message(client, make_agent, make_session):
    s, w, use = ask_bash(client, make_agent, make_session, "echo never")
    with w:
        mark = len(w.events)
        w.send({"type": "user.tool_confirmation", "tool_use_id": use.id, "result": "deny",
                "deny_message": "not on my watch"})
        w.until(is_final_stop)
    after = w.events[mark:]
    results = [e for e in after if e.type == "agent.tool_result"]
    assert len(results) == 1 and results[0].tool_use_id == use.id
    assert results[0].is_error is True
    text = text_of(results[0])
    assert "not on my watch" in text and "deni" in text.lower(), text
    # The turn continues (ADR 0007 §9): the model answers, then idle end_turn.
    messages = [text_of(e) for e in after if e.type == "agent.message"]
    assert len(messages) == 1 and messages[0].startswith("done: ")
    assert after[-1].stop_reason.type == "end_turn"


def test_answering_an_id_that_is_not_pending_is_400(client, make_agent, make_session):
    s, w, use = ask_bash(client, make_agent, make_session, "echo pending")
    with w:
        for event in (
            {"type": "user.tool_confirmation", "tool_use_id": NOT_AN_EVENT, "result": "allow"},
            {"type": "user.custom_tool_result", "custom_tool_use_id": NOT_AN_EVENT,
             "content": [{"type": "text", "text": "an answer to nothing"}]},
        ):
            with pytest.raises(anthropic.BadRequestError) as e:
                client.beta.sessions.events.send(s.id, events=[event])
            check_error(e.value, 400, "invalid_request_error", "tool_use_not_pending")
        # Still parked on the same id; the right answer still works.
        w.send({"type": "user.tool_confirmation", "tool_use_id": use.id, "result": "allow"})
        w.until(is_final_stop)
    assert w.events[-1].stop_reason.type == "end_turn"


def test_interrupt_mid_tool_ends_the_turn(client, make_session):
    s = make_session()
    with Watch(client, s.id) as w:
        w.send(user_message(SLEEP))
        w.until(lambda e: e.type == "agent.tool_use")
        mark = len(w.events)
        t0 = time.monotonic()
        echo = w.send({"type": "user.interrupt"})
        w.until_stop(timeout=15)
        elapsed = time.monotonic() - t0
    after = w.events[mark:]
    assert elapsed < 10, f"the turn took {elapsed:.1f}s to stop after the interrupt"
    assert after[-1].type == "session.status_idle" and after[-1].stop_reason.type == "end_turn"
    assert echo[0]["id"] in [e.id for e in after if e.type == "user.interrupt"]
    assert not [e for e in after if e.type == "agent.message"], "no agent.message after an interrupt"
    wait_status(client, s.id, "idle", timeout=5)
    # The next message is what the next turn answers (not the cancelled call's result, which
    # shares its model request's user message).
    again = run_turn(client, s.id, "still here")
    kinds = types(again.events)
    assert kinds[0] == "user.message" and text_of(again.events[0]) == "still here"
    assert kinds.count("agent.message") == 1 and kinds.index("session.status_running") < kinds.index("agent.message")
    assert text_of(again.of_type("agent.message")[0]) == "echo: still here"
    assert again.events[-1].stop_reason.type == "end_turn"


def test_interrupt_with_message_redirects(client, make_session):
    s = make_session()
    with Watch(client, s.id) as w:
        w.send(user_message(SLEEP))
        w.until(lambda e: e.type == "agent.tool_use")
        mark = len(w.events)
        t0 = time.monotonic()
        echo = w.send({"type": "user.interrupt"}, user_message("change of plan"))
        w.until(lambda e: e.type == "agent.message", timeout=15)
        w.until(is_final_stop)
        elapsed = time.monotonic() - t0
    after = w.events[mark:]
    kinds = types(after)
    assert elapsed < 10, f"the redirect took {elapsed:.1f}s"
    # Both inputs are in the log with their echoed ids; the message is answered by a model
    # request that starts after it, with its own text, and the session ends idle end_turn.
    ids = [e.id for e in after]
    assert echo[0]["id"] in ids and echo[1]["id"] in ids and ids.index(echo[0]["id"]) < ids.index(echo[1]["id"])
    message_at = ids.index(echo[1]["id"])
    assert "agent.message" in kinds[message_at:] and "span.model_request_start" in kinds[message_at:]
    replies = [text_of(e) for e in after[message_at:] if e.type == "agent.message"]
    assert replies == ["echo: change of plan"], replies
    assert w.events[-1].type == "session.status_idle" and w.events[-1].stop_reason.type == "end_turn"


def test_auto_policy_parks_like_always_ask(client, make_agent, make_session):
    tools = [{"type": "agent_toolset_20260401", "configs": [{"name": "read", "permission_policy": {"type": "auto"}}]}]
    agent = make_agent(tools=tools)
    stored = raw(client.beta.agents.with_raw_response.retrieve(agent.id), "agent")
    assert stored["tools"][0]["configs"][0]["permission_policy"] == {"type": "auto"}
    s = make_session(agent=agent)
    w = run_turn(client, s.id, 'tool:read {"file_path": "nothing.txt"}')
    uses = w.of_type("agent.tool_use")
    assert len(uses) == 1 and uses[0].evaluated_permission == "ask"
    assert w.events[-1].stop_reason.type == "requires_action" and w.events[-1].stop_reason.event_ids == [uses[0].id]
    assert not w.of_type("agent.tool_result")


def test_round_limit_ends_with_session_error_then_idle(client, make_session):
    s = make_session()
    w = run_turn(client, s.id, 'repeat:glob {"pattern": "*"}')
    kinds = types(w.events)
    # ADR 0007 §12: session.error{tool_use_limit_reached_error, exhausted}, then idle
    # retries_exhausted, as the SDK documents that error.
    assert kinds[-2:] == ["session.error", "session.status_idle"], kinds[-4:]
    error = w.events[-2].error
    assert error.type == "tool_use_limit_reached_error"
    assert error.retry_status.type == "exhausted" and error.message
    assert w.events[-1].stop_reason.type == "retries_exhausted"
    assert kinds.count("span.model_request_start") == 20, "native.max_rounds defaults to 20"
