"""Configured models, list cost and budgets, through the official SDK.

A gateway started here configures a `[models.priced]` table (the offline fake at list prices
dear enough that one request costs cents) beside its default fake model. The SDK's strict models
check the session's `usage` (with `list_cost`), `budget`, the `session.usage` event, the
`budget_reached` stop and the `session.budget_reached` webhook; the gateway's extension field
`serving_model` says which configured model serves the agent.
"""

from __future__ import annotations

from typing import Any, Iterator

import anthropic
import pytest
from anthropic.types.beta import (
    BetaManagedAgentsBudgetLimit,
    BetaManagedAgentsSessionUsage,
    BetaManagedAgentsSessionUsageEvent,
    BetaWebhookEvent,
)
from anthropic.types.beta.sessions import (
    BetaManagedAgentsAgentThreadContextCompactedEvent,
    BetaManagedAgentsSessionErrorEvent,
)

from conftest import CLOUD, MODEL, TOOLSET, Recorder, Watch, new_client, spawn_gateway, user_message
from helpers import check_error_response, raw, validate
from test_webhooks import check_delivery

# USD per million tokens: a request of a few hundred tokens costs cents.
PRICE = "1000"
ONE_CENT = {"type": "limit", "max_list_cost": {"amount": "1", "currency": "USD"}}


@pytest.fixture(scope="module")
def gateway() -> Iterator[Any]:
    with spawn_gateway("budgets", GATEWAY_ALLOW_PRIVATE_WEBHOOK_TARGETS="true",
                       GATEWAY_MODELS__PRICED__PROVIDER="fake",
                       GATEWAY_MODELS__PRICED__PRICES__INPUT=PRICE,
                       GATEWAY_MODELS__PRICED__PRICES__OUTPUT=PRICE,
                       GATEWAY_MODELS__SMALL__PROVIDER="fake",
                       GATEWAY_MODELS__SMALL__CONTEXT_WINDOW="1500") as gw:
        yield gw


@pytest.fixture(scope="module")
def sdk(gateway: Any) -> Iterator[anthropic.Anthropic]:
    # Strict response validation, and the raw bytes of streams kept (`Watch.raw_frames`).
    recorder = Recorder()
    client = new_client(recorder, base_url=gateway.url, api_key=gateway.api_key)
    try:
        yield client
    finally:
        client.close()
        recorder.close()
    assert not recorder.problems, recorder.problems


@pytest.fixture(scope="module")
def env(sdk: anthropic.Anthropic) -> str:
    return raw(sdk.beta.environments.with_raw_response.create(name="budgets", config=CLOUD), "environment")["id"]


def agent(sdk: anthropic.Anthropic, model: str) -> dict:
    return raw(sdk.beta.agents.with_raw_response.create(name=f"budget-{model}", model=model, tools=[TOOLSET]), "agent")


def test_agents_and_sessions_say_which_configured_model_serves_them(sdk, env):
    priced = agent(sdk, "priced")
    assert priced["serving_model"] == {"name": "priced", "provider": "fake", "model": "priced"}, priced
    # A real model's id no table configures goes to the default: the fake, and it says so.
    claude = agent(sdk, MODEL)
    assert claude["serving_model"] == {"name": "default", "provider": "fake", "model": MODEL}, claude
    body = raw(sdk.beta.sessions.with_raw_response.create(agent=claude["id"], environment_id=env), "session")
    assert body["serving_model"] == claude["serving_model"] and body["budget"] is None


def test_a_budget_below_one_turn_stops_the_next_request_with_the_webhook(sdk, gateway, env, endpoints, receivers):
    rx = receivers.start("budget")
    endpoint = endpoints.register(gateway, rx.url, event_types=["session.budget_reached", "session.status_idled"])
    priced = agent(sdk, "priced")
    body = raw(sdk.beta.sessions.with_raw_response.create(agent=priced["id"], environment_id=env, budget=ONE_CENT),
               "session")
    validate(BetaManagedAgentsBudgetLimit, body["budget"])
    assert body["budget"] == ONE_CENT, body
    sid = body["id"]

    with Watch(sdk, sid) as w:
        w.send(user_message('tool:bash {"command": "echo spent"}'))
        events = w.until_stop()
    kinds = [e.type for e in events]
    # The first request ran (nothing was spent yet) and its tool too; the next was not made.
    assert kinds.count("span.model_request_start") == 1, kinds
    assert "agent.tool_result" in kinds, kinds
    idle = events[-1]
    assert idle.type == "session.status_idle" and idle.stop_reason.type == "budget_reached", idle
    usage_event = [f for f in w.raw_frames() if f.get("type") == "session.usage"]
    assert len(usage_event) == 1, kinds
    parsed = validate(BetaManagedAgentsSessionUsageEvent, usage_event[0])
    assert parsed.budget is not None and parsed.budget.max_list_cost.amount == "1"
    cost = parsed.usage.list_cost
    assert cost is not None and cost.currency == "USD" and int(cost.amount) >= 1, parsed.usage

    body = raw(sdk.beta.sessions.with_raw_response.retrieve(sid), "session")
    validate(BetaManagedAgentsSessionUsage, body["usage"])
    assert body["usage"]["list_cost"] == {"amount": cost.amount, "currency": "USD"}, body["usage"]

    # The next turn makes no request at all.
    with Watch(sdk, sid) as w:
        w.send(user_message("hello"))
        again = w.until_stop()
    assert "span.model_request_start" not in [e.type for e in again]
    assert again[-1].stop_reason.type == "budget_reached"

    # The webhook, signed, in the SDK's shape, once per budget stop.
    got = rx.wait(lambda reqs: sum(1 for r in reqs if r.kind() == "session.budget_reached"
                                   and r.session_id() == sid) >= 2, "two session.budget_reached", 15)
    reached = [check_delivery(r, rx.url, endpoint["secret"]) for r in got
               if r.kind() == "session.budget_reached" and r.session_id() == sid]
    for b in reached:
        assert validate(BetaWebhookEvent, b).data.type == "session.budget_reached"
    assert len({b["id"] for b in reached}) == 2, "each stop is its own webhook"
    idled = [r for r in got if r.kind() == "session.status_idled" and r.session_id() == sid]
    assert idled and all(r.webhook_id not in {b["id"] for b in reached} for r in idled), "ids are distinct"


def test_budget_rules_on_create_and_update(sdk, env):
    # A model without list prices cannot be budgeted.
    plain = agent(sdk, MODEL)
    with pytest.raises(anthropic.BadRequestError) as e:
        sdk.beta.sessions.create(agent=plain["id"], environment_id=env, budget=ONE_CENT)
    check_error_response(e.value.response, 400, "invalid_request_error")
    assert "model_not_budgetable" in e.value.response.text

    priced = agent(sdk, "priced")
    uncapped = sdk.beta.sessions.create(agent=priced["id"], environment_id=env)
    with pytest.raises(anthropic.BadRequestError) as e:
        sdk.beta.sessions.update(uncapped.id, budget=ONE_CENT)
    assert "budget_create_only" in e.value.response.text

    capped = sdk.beta.sessions.create(agent=priced["id"], environment_id=env, budget=ONE_CENT)
    with Watch(sdk, capped.id) as w:
        w.send(user_message("spend something"))
        w.until_stop()
    spent = int(sdk.beta.sessions.retrieve(capped.id).usage.list_cost.amount)
    lower = {"type": "limit", "max_list_cost": {"amount": str(spent), "currency": "USD"}}
    with pytest.raises(anthropic.BadRequestError) as e:
        sdk.beta.sessions.update(capped.id, budget=lower)
    assert "budget_not_raised" in e.value.response.text
    for bad in ({"type": "limit", "max_list_cost": {"amount": "010", "currency": "USD"}},
                {"type": "limit", "max_list_cost": {"amount": "5", "currency": "EUR"}},
                {"type": "cap", "max_list_cost": {"amount": "5", "currency": "USD"}}):
        with pytest.raises(anthropic.BadRequestError):
            sdk.beta.sessions.update(capped.id, budget=bad)

    raised = {"type": "limit", "max_list_cost": {"amount": str(spent + 100), "currency": "USD"}}
    body = raw(sdk.beta.sessions.with_raw_response.update(capped.id, budget=raised), "session")
    assert body["budget"] == raised
    body = raw(sdk.beta.sessions.with_raw_response.update(capped.id, budget=None), "session")
    assert body["budget"] is None
    updates = [e for e in sdk.beta.sessions.events.list(capped.id) if e.type == "session.updated"]
    assert [u.model_dump().get("budget") for u in updates][-2:] == [raised, None], updates
    with pytest.raises(anthropic.BadRequestError) as e:
        sdk.beta.sessions.update(capped.id, budget=raised)
    assert "budget_create_only" in e.value.response.text, "a removed budget cannot come back"


def test_a_long_session_compacts_in_the_event_list_and_the_limit_is_an_error(sdk, env):
    small = raw(sdk.beta.agents.with_raw_response.create(name="small-window", model="small", tools=[]), "agent")
    sid = sdk.beta.sessions.create(agent=small["id"], environment_id=env).id
    first, second = "first " + "a" * 2000, "second " + "b" * 2000
    for text in (first, second):
        with Watch(sdk, sid) as w:
            w.send(user_message(text))
            events = w.until_stop()
        assert events[-1].stop_reason.type == "end_turn", [e.type for e in events]
        assert [m.content[0].text for m in w.of_type("agent.message")] == [f"echo: {text}"], "it keeps answering"
    listed = [e.model_dump(mode="json") for e in sdk.beta.sessions.events.list(sid, limit=100)]
    kinds = [e["type"] for e in listed]
    assert kinds.count("agent.thread_context_compacted") == 1, kinds
    compacted = listed[kinds.index("agent.thread_context_compacted")]
    validate(BetaManagedAgentsAgentThreadContextCompactedEvent, compacted)
    # The history is whole: both messages, the compaction between the second message's
    # arrival and its answer.
    messages = [i for i, k in enumerate(kinds) if k == "user.message"]
    answer = max(i for i, k in enumerate(kinds) if k == "agent.message")
    assert len(messages) == 2 and messages[1] < kinds.index("agent.thread_context_compacted") < answer, kinds

    # A message larger than the window even alone: the limit's error, then idle.
    with Watch(sdk, sid) as w:
        w.send(user_message("huge " + "c" * 8000))
        events = w.until_stop()
        frames = w.raw_frames()
    errors = [f for f in frames if f.get("type") == "session.error"]
    assert len(errors) == 1, [e.type for e in events]
    parsed = validate(BetaManagedAgentsSessionErrorEvent, errors[0])
    assert parsed.error.type == "compaction_limit_reached_error", parsed
    assert events[-1].stop_reason.type == "retries_exhausted"
    assert "agent.message" not in [e.type for e in events]
