"""Webhooks (gateway extension API + Standard Webhooks deliveries), checked with the verifiers a
user has: `standardwebhooks.Webhook(secret).verify(body, headers)` and the SDK's
`client.beta.webhooks.unwrap(body, headers=..., key=secret)` (anthropic[webhooks]==2.14.0).

Endpoints are registered with `POST /v1/webhooks` on gateways this module starts
(`spawn_gateway`, with an API key and `GATEWAY_ALLOW_PRIVATE_WEBHOOK_TARGETS=true`, since every
receiver here is on loopback); each test deletes the endpoints it made. Receivers
(`receivers` fixture) are tiny HTTP servers in the test that record each request and answer as
scripted (500s, a 302). examples/self-hosted/handler.py runs as a subprocess (`example_handlers`)
and is observed through its `GET /state` JSON (`executors[<session>].{pid, running, starts,
started_by}` and `counters`), its child processes (/proc) and its log (stderr, to a file).

`test_example_handler_with_signed_deliveries` drives the example with deliveries the test signs
itself, so it exercises the example (verification, dedupe, restart, release) without depending
on the gateway's delivery side. A failed test prints the gateways', receivers', handlers' and
workers' logs.
"""

from __future__ import annotations

import base64
import concurrent.futures
import functools
import json
import os
import signal
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

import anthropic
import httpx2
import pytest
from anthropic.types.beta import BetaWebhookEvent
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from conftest import CLOUD, MODEL, TOOLSET, Received, Recorder, free_port, spawn_gateway
from helpers import (
    check_error_response,
    check_webhook_endpoint,
    check_webhook_event,
    raw,
    request_id,
    sign_webhook,
    validate,
)
from test_self_hosted import (  # `connect`: the fixture making the application's clients
    TTL,
    TURN,
    App,
    connect,
    after,
    asks_for,
    index,
    ends_with_end_turn,
    is_connection,
    is_final_idle,
    one_call,
    paths,
    results_for,
    summary,
    turn_ended,
    worker_result,
)

ACTION = "agent.session.action_required"
FAILED = "agent.session.failed"
RUN_STARTED = "session.status_run_started"
IDLED = "session.status_idled"
CONNECT_TIMEOUT = 20  # the main gateway: long enough for the example to start a worker
SHORT_CONNECT_TIMEOUT = 3  # the fast gateway (test 3)
MAX_BACKOFF_MS = 200  # the fast gateway: so that 20 failed attempts take seconds (test 4c)
DISABLE_AFTER = 20  # consecutive failed attempts that disable an endpoint
# Delivered types the SDK's BetaWebhookEventData union knows; the agent.session.* ones it does not.
SDK_TYPED = (RUN_STARTED, IDLED, "session.status_terminated")

HI = 'tool:bash {"command": "echo hi > hi.txt"}'
HI_ENV = 'tool:bash {"command": "echo hi > hi.txt; env > env.txt"}'
AGAIN = 'tool:bash {"command": "echo again > again.txt"}'
LATE = 'tool:bash {"command": "echo late > late.txt"}'


# --- gateways and the application ----------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway() -> Iterator[Any]:
    with spawn_gateway("webhooks", GATEWAY_ALLOW_PRIVATE_WEBHOOK_TARGETS="true",
                       GATEWAY_ENVIRONMENTS__HEARTBEAT_TTL_SECS=str(TTL),
                       GATEWAY_ENVIRONMENTS__CONNECT_TIMEOUT_SECS=str(CONNECT_TIMEOUT)) as gw:
        yield gw


@pytest.fixture(scope="module")
def fast_gateway() -> Iterator[Any]:
    """A short connect timeout and a 200 ms cap on the retry backoff."""
    with spawn_gateway("webhooks-fast", GATEWAY_ALLOW_PRIVATE_WEBHOOK_TARGETS="true",
                       GATEWAY_ENVIRONMENTS__HEARTBEAT_TTL_SECS=str(TTL),
                       GATEWAY_ENVIRONMENTS__CONNECT_TIMEOUT_SECS=str(SHORT_CONNECT_TIMEOUT),
                       GATEWAY_WEBHOOK_DELIVERY__MAX_BACKOFF_MS=str(MAX_BACKOFF_MS)) as gw:
        yield gw


@pytest.fixture
def app(gateway: Any, connect: Callable[[Any], App]) -> App:
    return connect(gateway)


def cloud_session(app: App) -> str:
    agent = raw(app.sdk.beta.agents.with_raw_response.create(name="webhook-agent", model=MODEL, tools=[TOOLSET]),
                "agent")
    env = raw(app.sdk.beta.environments.with_raw_response.create(name="webhook-cloud", config=CLOUD), "environment")
    return raw(app.sdk.beta.sessions.with_raw_response.create(agent=agent["id"], environment_id=env["id"]),
               "session")["id"]


def turn(app: App, session_id: str, text: str = "hello there", timeout: float = 15.0) -> list[dict]:
    """Sends one user.message and waits for the turn's end; returns the events after it."""
    mid = app.send(session_id, text)
    return after(app.wait(session_id, turn_ended(mid), f"the turn {text!r} to end", timeout), mid)


# --- verifying deliveries --------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def sdk() -> anthropic.Anthropic:
    """Only for `beta.webhooks.unwrap`, which sends nothing."""
    return anthropic.Anthropic(api_key="unused", base_url="http://127.0.0.1:9")


def verify_both(secret: str, req: Received) -> Any:
    """The delivery verifies with standardwebhooks and with the SDK; returns the SDK's event."""
    body = req.body.decode("utf-8")
    payload = Webhook(secret).verify(body, req.headers)
    assert payload == req.json()
    event = sdk().beta.webhooks.unwrap(body, headers=req.headers, key=secret)
    assert event.type == "event" and event.id == payload["id"], event
    assert event.data.type == payload["data"]["type"] and event.data.id == payload["data"]["id"], event
    return event


def check_delivery(req: Received, endpoint_url: str, secret: str) -> dict:
    """One delivery as a user's receiver sees it: POST to the registered path, JSON, Standard
    Webhooks headers (`webhook-id` == body id, integer `webhook-timestamp`, `v1,` signatures),
    a valid body, and a signature that both verifiers accept. Returns the body."""
    assert req.method == "POST", req
    assert req.path == urlsplit(endpoint_url).path, f"delivered to {req.path}, registered {endpoint_url}"
    assert req.headers.get("content-type", "").startswith("application/json"), req.headers
    for name in ("webhook-id", "webhook-timestamp", "webhook-signature"):
        assert req.headers.get(name), f"no {name} header: {req.headers}"
    body = check_webhook_event(req.json())
    assert req.webhook_id == body["id"], f"webhook-id {req.webhook_id!r} != body id {body['id']!r}"
    stamp = req.headers["webhook-timestamp"]
    assert stamp.isdigit(), f"webhook-timestamp must be integer unix seconds, got {stamp!r}"
    assert abs(int(stamp) - time.time()) < 120, f"webhook-timestamp {stamp} is not now"
    for entry in req.headers["webhook-signature"].split(" "):
        version, _, sig = entry.partition(",")
        assert version == "v1" and sig, f"signature entry {entry!r} is not v1,<base64>"
    verify_both(secret, req)
    if body["data"]["type"] in SDK_TYPED:
        # The SDK's own model (organization_id and workspace_id are required strings there).
        validate(BetaWebhookEvent, body)
    return body


def refused(secret: str, body: str, headers: dict[str, str], what: str) -> None:
    """Both verifiers reject the (forged) delivery."""
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body, headers)
        pytest.fail(f"standardwebhooks accepted {what}")
    with pytest.raises(WebhookVerificationError):
        sdk().beta.webhooks.unwrap(body, headers=headers, key=secret)
        pytest.fail(f"client.beta.webhooks.unwrap accepted {what}")


def for_session(reqs: list[Received], session_id: str, kind: str | None = None) -> list[Received]:
    return [r for r in reqs if r.session_id() == session_id and (kind is None or r.kind() == kind)]


def created(body: dict) -> datetime:
    return datetime.fromisoformat(body["created_at"].replace("Z", "+00:00"))


def new_secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(32)).decode()


def new_webhook_id() -> str:
    return "whe_" + uuid.uuid4().hex


def event_body(kind: str, session_id: str, webhook_id: str, **data: Any) -> str:
    return json.dumps({"type": "event", "id": webhook_id,
                       "created_at": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
                       "data": {"type": kind, "id": session_id, **data}})


def action_required(session_id: str, environment_id: str, webhook_id: str) -> str:
    return event_body(ACTION, session_id, webhook_id,
                      required_action={"type": "environment_connection", "environment_id": environment_id})


def concurrently(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Runs fn(0..n-1) in n threads released together."""
    barrier = threading.Barrier(n)

    def run(i: int) -> Any:
        barrier.wait()
        return fn(i)

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        return list(pool.map(run, range(n)))


def wait_until(check: Callable[[], Any], what: str, timeout: float, explain: Callable[[], str] = lambda: "") -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f}s. {explain()}"
        time.sleep(0.1)
    return value


# --- the endpoint API ------------------------------------------------------------------------------


def test_webhook_endpoint_api(gateway, endpoints, receivers):
    rx = receivers.start("api")
    some = endpoints.register(gateway, rx.url, [IDLED], description="compat: idles only")
    assert some["event_types"] == [IDLED], some
    assert some.get("description") == "compat: idles only", some
    every = endpoints.register(gateway, rx.url + "/all")
    assert every["event_types"] == [], f"no event_types means every type, shown as []: {every}"
    assert every["secret"] != some["secret"], "two endpoints share a signing secret"

    http = endpoints.http(gateway)
    got = endpoints.get(gateway, some["id"])
    for key in ("id", "url", "event_types", "status", "created_at", "disabled_at"):
        assert got[key] == some[key], f"GET differs from the create answer on {key}: {got} vs {some}"
    listed = http.get("/v1/webhooks")
    request_id(listed.headers)
    assert listed.status_code == 200, listed.text
    page = listed.json()
    assert set(page) >= {"data", "next_page"} and page["next_page"] is None, page
    ids = [check_webhook_endpoint(e, secret=False)["id"] for e in page["data"]]
    assert some["id"] in ids and every["id"] in ids, ids

    gone = http.delete(f"/v1/webhooks/{some['id']}")
    request_id(gone.headers)
    assert gone.status_code in (200, 204), f"DELETE: {gone.status_code} {gone.text}"
    missing = http.get(f"/v1/webhooks/{some['id']}")
    assert missing.status_code == 404, f"GET after DELETE: {missing.status_code} {missing.text}"
    check_error_response(missing, 404, "not_found_error")
    assert some["id"] not in [e["id"] for e in http.get("/v1/webhooks").json()["data"]]
    assert http.post(f"/v1/webhooks/{some['id']}/enable").status_code == 404, "enable of a deleted endpoint"


def test_private_targets_are_refused_by_default(keyed_gateway):
    """A gateway on its defaults (no GATEWAY_ALLOW_PRIVATE_WEBHOOK_TARGETS) refuses loopback URLs."""
    headers = {"authorization": f"Bearer {keyed_gateway.key}", "anthropic-beta": "managed-agents-2026-04-01"}
    with httpx2.Client(base_url=keyed_gateway.url, headers=headers, timeout=30) as http:
        for url in ("http://127.0.0.1:9/webhooks", "http://[::1]:9/webhooks"):
            r = http.post("/v1/webhooks", json={"url": url})
            if r.status_code == 200:  # don't leave it behind on the shared gateway
                http.delete(f"/v1/webhooks/{r.json().get('id')}")
            assert r.status_code == 400, f"registering {url}: {r.status_code} {r.text[:500]}"
            check_error_response(r, 400, "invalid_request_error")


# --- 1. deliveries verify; forgeries do not ---------------------------------------------------------


def test_deliveries_verify_and_forgeries_do_not(gateway, app, endpoints, receivers):
    rx = receivers.start("plain")
    endpoint = endpoints.register(gateway, rx.url)
    secret = endpoint["secret"]
    sid = cloud_session(app)
    ends_with_end_turn(turn(app, sid))

    got = rx.wait(lambda reqs: for_session(reqs, sid, RUN_STARTED) and for_session(reqs, sid, IDLED),
                  f"{RUN_STARTED} and {IDLED} for {sid}", 10)
    mine = for_session(got, sid)
    bodies = {}
    for req in mine:
        body = check_delivery(req, rx.url, secret)
        bodies.setdefault(body["data"]["type"], body)
    started, idled = bodies[RUN_STARTED], bodies[IDLED]
    assert started["id"] != idled["id"], "two events share a webhook id"
    assert created(started) <= created(idled), (started, idled)
    assert all(r.status == 200 for r in mine), mine
    one = for_session(got, sid, IDLED)[0]
    assert len({r.webhook_id for r in for_session(got, sid, IDLED)}) == 1, "one idle, one webhook id"

    # Forgeries, each refused by both verifiers (nothing is re-signed).
    text = one.body.decode("utf-8")
    assert Webhook(secret).verify(text, one.headers)  # the genuine one passes right now
    refused(new_secret(), text, one.headers, "a delivery checked with another secret")
    at = text.index(sid) + len(sid) - 1  # flip one bit of one ASCII byte of the session id
    flipped = text[:at] + chr(ord(text[at]) ^ 1) + text[at + 1:]
    assert flipped != text and flipped.isascii()
    refused(secret, flipped, one.headers, "a body with one byte changed")
    stamp = int(one.headers["webhook-timestamp"])
    for shift in (-360, 360):
        moved = {**one.headers, "webhook-timestamp": str(stamp + shift)}
        refused(secret, text, moved, f"a timestamp shifted by {shift:+d} s")
    refused(secret, text, {k: v for k, v in one.headers.items() if k != "webhook-signature"}, "no signature")


# --- 2. the example handler starts exactly one executor ------------------------------------------


def test_webhook_starts_one_executor_in_the_example(gateway, app, endpoints, example_handlers):
    env_id = app.environment("webhook-launch")
    env_key = app.environment_key(env_id)["key"]
    port = free_port()
    endpoint = endpoints.register(gateway, f"http://127.0.0.1:{port}/webhooks", [ACTION, FAILED])
    secret = endpoint["secret"]
    handler = example_handlers.start(gateway.url, gateway.api_key, env_id, env_key, secret, port=port)
    assert handler.state()["executors"] == {}

    # No executor runs: the message asks for one, the gateway tells the handler, the handler starts it.
    sid = app.session(env_id)
    mid = app.send(sid, HI)
    log = app.wait(sid, turn_ended(mid), "the turn to end once the handler has started a worker", TURN + 10,
                   handler.describe)
    turn1 = after(log, mid)
    asked = index(turn1, asks_for(env_id), "environment_connection request")
    connected = index(turn1, is_connection("connected"), "agent.session.environment.connected")
    result = worker_result(turn1, one_call(turn1, "bash", {"command": "echo hi > hi.txt"}))
    assert asked < connected < turn1.index(result), summary(turn1)
    ends_with_end_turn(turn1)
    workdir = handler.workdir_root / sid
    assert (workdir / "hi.txt").read_text() == "hi\n", f"{workdir}: {paths(handler.workdir_root)}"
    app.connection_is(sid, "connected")

    state = handler.state()
    assert list(state["executors"]) == [sid], state
    executor = state["executors"][sid]
    assert executor["running"] and executor["starts"] == 1, executor
    assert len(executor["started_by"]) == 1 and executor["started_by"][0].startswith("whe_"), (
        f"the executor was not started by a gateway delivery: {executor}")
    assert state["counters"]["received"] >= 1 and state["counters"]["started"] == 1, state
    pid = executor["pid"]

    # Duplicates, validly signed with the endpoint's secret: 5 at once with one fresh webhook id
    # (a retried delivery), then 5 at once with 5 ids (repeated notifications).
    before = state["counters"]
    same = new_webhook_id()
    same_body = action_required(sid, env_id, same)
    answers = concurrently(5, lambda _i: handler.post(same_body, sign_webhook(secret, same_body, same)).status_code)
    ids = [new_webhook_id() for _ in range(5)]
    bodies = [action_required(sid, env_id, i) for i in ids]
    answers += concurrently(5, lambda i: handler.post(bodies[i], sign_webhook(secret, bodies[i], ids[i])).status_code)
    assert answers == [200] * 10, answers

    def settled() -> dict | None:
        s = handler.state()
        c = s["counters"]
        done = c["ignored"] + c["started"] + c["errors"] - before["ignored"] - before["started"] - before["errors"]
        return s if c["received"] - before["received"] >= 10 and s["queue_depth"] == 0 and done >= 6 else None

    state = wait_until(settled, "the handler to process the 10 duplicates", 10, handler.describe)
    counters = state["counters"]
    assert counters["duplicate"] - before["duplicate"] == 4, counters
    assert counters["started"] == 1 and counters["errors"] == 0, counters
    executor = state["executors"][sid]
    assert executor["running"] and executor["starts"] == 1 and executor["pid"] == pid, executor
    assert handler.children() == [pid], f"executor processes: {handler.children()}, expected only {pid}"

    # No secret in the handler's log or in the executor's argv.
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = f.read().decode("utf-8", "replace")
    text = handler.log_text()
    for secret_value in handler.secrets:
        assert secret_value not in text, "a secret is in the handler's log"
        assert secret_value not in argv, "a secret is in the executor's argv"


# --- the example handler, driven by deliveries the test signs -------------------------------------


def test_example_handler_with_signed_deliveries(gateway, app, example_handlers):
    env_id = app.environment("webhook-example")
    env_key = app.environment_key(env_id)["key"]
    secret = new_secret()
    handler = example_handlers.start(gateway.url, gateway.api_key, env_id, env_key, secret)
    sid = app.session(env_id)

    # Refused: 401, nothing queued.
    wid = new_webhook_id()
    body = action_required(sid, env_id, wid)
    good = sign_webhook(secret, body, wid)
    forged = {
        "no signature headers": (body, {"content-type": "application/json"}),
        "another secret": (body, sign_webhook(new_secret(), body, wid)),
        "a changed body": (body.replace(env_id, env_id[:-1] + ("A" if env_id[-1] != "A" else "B")), good),
        "a stale timestamp": (body, sign_webhook(secret, body, wid, int(time.time()) - 360)),
        "a malformed signature": (body, {**good, "webhook-signature": "v1"}),
    }
    for what, (b, h) in forged.items():
        r = handler.post(b, h)
        assert r.status_code == 401, f"{what}: {r.status_code} {r.text}"
    state = handler.state()
    assert state["counters"]["refused"] == len(forged), state
    assert state["counters"]["received"] == 0 and state["executors"] == {}, state

    # The session asks; 5 different deliveries at once while it waits: one executor.
    mid = app.send(sid, HI_ENV)
    app.wait(sid, lambda log: any(asks_for(env_id)(e) for e in after(log, mid)), "the connection request", 10)
    ids = [new_webhook_id() for _ in range(5)]
    bodies = [action_required(sid, env_id, i) for i in ids]
    answers = concurrently(5, lambda i: handler.post(bodies[i], sign_webhook(secret, bodies[i], ids[i])).status_code)
    assert answers == [200] * 5, answers
    log = app.wait(sid, turn_ended(mid), "the turn to end on the handler's executor", TURN, handler.describe)
    turn1 = after(log, mid)
    worker_result(turn1, one_call(turn1, "bash", {"command": "echo hi > hi.txt; env > env.txt"}))
    ends_with_end_turn(turn1)
    workdir = handler.workdir_root / sid
    assert (workdir / "hi.txt").read_text() == "hi\n", paths(handler.workdir_root)
    assert env_key not in (workdir / "env.txt").read_text(), "the agent's bash can read the environment key"
    state = wait_until(lambda: (s := handler.state())["queue_depth"] == 0 and s["counters"]["queued"] == 5 and s,
                       "the 5 deliveries to be handled", 5, handler.describe)
    executor = state["executors"][sid]
    assert executor["starts"] == 1 and executor["running"], state
    assert executor["started_by"][0] in ids, executor
    assert state["counters"]["started"] == 1, state
    assert handler.children() == [executor["pid"]], handler.children()

    # The executor dies: the gateway sees the lease lapse; the next input asks again and the
    # handler starts a new one.
    os.killpg(executor["pid"], signal.SIGKILL)
    wait_until(lambda: not handler.state()["executors"][sid]["running"], "the handler to see its executor gone", 5)
    app.wait(sid, lambda log: any(is_connection("disconnected")(e) for e in after(log, mid)),
             "agent.session.environment.disconnected", TTL + 8)
    mid2 = app.send(sid, AGAIN)
    app.wait(sid, lambda log: any(asks_for(env_id)(e) for e in after(log, mid2)), "the next connection request", 10)
    again = new_webhook_id()
    body2 = action_required(sid, env_id, again)
    assert handler.post(body2, sign_webhook(secret, body2, again)).status_code == 200
    log = app.wait(sid, turn_ended(mid2), "the next turn to end on a restarted executor", TURN, handler.describe)
    worker_result(after(log, mid2), one_call(after(log, mid2), "bash", {"command": "echo again > again.txt"}))
    assert (workdir / "again.txt").read_text() == "again\n", paths(handler.workdir_root)
    executor = handler.state()["executors"][sid]
    assert executor["starts"] == 2 and executor["running"] and executor["started_by"][-1] == again, executor

    # agent.session.failed releases the session's compute.
    fail_id = new_webhook_id()
    body3 = event_body(FAILED, sid, fail_id, error={"type": "environment_connection_timeout", "message": "test"})
    assert handler.post(body3, sign_webhook(secret, body3, fail_id)).status_code == 200
    wait_until(lambda: not handler.state()["executors"][sid]["running"], "agent.session.failed to stop the executor",
               10, handler.describe)
    wait_until(lambda: handler.children() == [], "the executor process to be gone", 5, lambda: str(handler.children()))
    assert handler.state()["counters"]["released"] == 1


# --- 3. connect timeout, no handler ------------------------------------------------------------


def test_connect_timeout_delivers_agent_session_failed(fast_gateway, connect, endpoints, receivers, workers):
    gw = fast_gateway
    app = connect(gw)
    rx = receivers.start("timeout")
    endpoint = endpoints.register(gw, rx.url, [ACTION, FAILED])
    secret = endpoint["secret"]
    env_id = app.environment("webhook-timeout")
    env_key = app.environment_key(env_id)["key"]
    sid = app.session(env_id)

    sent_at = time.monotonic()
    mid = app.send(sid, LATE)

    def gave_up(log: list[dict]) -> bool:
        turn_ = after(log, mid)
        return any(is_connection("failed")(e) for e in turn_) and any(is_final_idle(e) for e in turn_)

    log = app.wait(sid, gave_up, "agent.session.environment.failed and the turn's end", SHORT_CONNECT_TIMEOUT + 8)
    assert time.monotonic() - sent_at >= SHORT_CONNECT_TIMEOUT - 0.5, "it did not wait for an executor"
    turn1 = after(log, mid)
    use = one_call(turn1, "bash", {"command": "echo late > late.txt"})
    results = results_for(turn1, use["id"])
    assert len(results) == 1 and results[0]["is_error"] is True, summary(turn1)

    got = rx.wait(lambda reqs: for_session(reqs, sid, ACTION) and for_session(reqs, sid, FAILED),
                  f"{ACTION} and {FAILED} for {sid}", 10)
    mine = for_session(got, sid)
    assert {r.kind() for r in mine} == {ACTION, FAILED}, f"only the subscribed types: {mine}"
    ask_req, fail_req = for_session(got, sid, ACTION)[0], for_session(got, sid, FAILED)[0]
    ask, fail = check_delivery(ask_req, rx.url, secret), check_delivery(fail_req, rx.url, secret)
    action = ask["data"]["required_action"]
    assert action["type"] == "environment_connection" and action["environment_id"] == env_id, ask
    assert fail["data"]["error"]["type"] and fail["data"]["error"]["message"], fail
    assert ask_req.at < fail_req.at, mine
    arrived = rx.started + fail_req.at - sent_at
    assert arrived >= SHORT_CONNECT_TIMEOUT - 0.5, f"{FAILED} arrived {arrived:.1f}s after the send"
    waited = (created(fail) - created(ask)).total_seconds()
    assert waited >= SHORT_CONNECT_TIMEOUT - 1, f"{FAILED} was created {waited:.1f}s after {ACTION}"
    app.connection_is(sid, "failed")

    # A worker that connects afterwards does not run the input that timed out.
    worker = workers.start(gw.url, env_id, env_key)
    time.sleep(5.0)
    assert worker.alive, worker.state()
    assert not (worker.workdir / "late.txt").exists(), "a late worker ran the call that had timed out"
    assert len(results_for(app.events(sid), use["id"])) == 1


# --- 4. retries, redirects, disabling ----------------------------------------------------------


def delivery_counts(http) -> dict[str, float]:
    """The gateway's count of webhook delivery attempts by outcome, from `/metrics`."""
    prefix = 'gateway_delivery_duration_seconds_count{channel="webhook",outcome="'
    counts = {"delivered": 0.0, "retry": 0.0, "failed": 0.0}
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(prefix):
            outcome, value = line[len(prefix):].split('"} ')
            counts[outcome] = float(value)
    return counts


def test_retries_keep_the_webhook_id(gateway, app, endpoints, receivers):
    counted = delivery_counts(endpoints.http(gateway))
    rx = receivers.start("flaky", lambda _req, attempt: (500, {}) if attempt <= 2 else (200, {}))
    endpoint = endpoints.register(gateway, rx.url, [IDLED])
    sid = cloud_session(app)
    turn(app, sid)

    got = rx.wait(lambda reqs: len(for_session(reqs, sid)) >= 3, "three attempts at the idle event", 15)
    mine = for_session(got, sid)
    assert [r.status for r in mine] == [500, 500, 200], mine
    assert len({r.webhook_id for r in mine}) == 1, f"every retry carries the same webhook-id: {mine}"
    assert len({json.dumps(r.json(), sort_keys=True) for r in mine}) == 1, "the retried body changed"
    for r in mine:
        check_delivery(r, rx.url, endpoint["secret"])
    first, second = mine[1].at - mine[0].at, mine[2].at - mine[1].at
    assert 0.5 <= first <= 5, f"the first retry came {first:.2f}s after the first attempt (expected ~1s)"
    assert second >= 0.5, f"the second retry came {second:.2f}s after the first retry"
    time.sleep(2.5)
    assert len(for_session(rx.requests(), sid)) == 3, f"retried after a 200: {for_session(rx.requests(), sid)}"
    now = endpoints.get(gateway, endpoint["id"])
    assert now["status"] == "enabled" and now["consecutive_failures"] == 0, now
    # The attempts are counted by outcome (other endpoints of this gateway may add to them).
    after = delivery_counts(endpoints.http(gateway))
    assert after["retry"] - counted["retry"] >= 2 and after["delivered"] - counted["delivered"] >= 1, (counted, after)


def test_redirects_are_failures_and_never_followed(gateway, app, endpoints, receivers):
    """A 3xx is a failed attempt (not a success, and not retryable: retries are for network
    errors, 408, 429 and 5xx only); its Location is never requested."""
    target = receivers.start("target")
    rx = receivers.start("redirect", lambda _req, _n: (302, {"location": target.url}))
    endpoint = endpoints.register(gateway, rx.url, [IDLED])
    sid = cloud_session(app)
    turn(app, sid)

    got = rx.wait(lambda reqs: for_session(reqs, sid), "the idle event", 10)
    check_delivery(for_session(got, sid)[0], rx.url, endpoint["secret"])
    failures = wait_until(lambda: endpoints.get(gateway, endpoint["id"])["consecutive_failures"],
                          "the 302 to count as a failed attempt", 3)
    assert failures == 1, f"one 302, {failures} consecutive failures"
    time.sleep(2.5)  # well past the first retry (~1 s) of a retryable failure
    mine = for_session(rx.requests(), sid)
    assert len(mine) == 1 and mine[0].status == 302, f"a 302 is not retried: {mine}"
    assert target.requests() == [], f"the Location was followed: {target.requests()}"
    assert endpoints.get(gateway, endpoint["id"])["status"] == "enabled"


def test_endpoint_is_disabled_after_20_failures_and_enabled_again(fast_gateway, connect, endpoints, receivers):
    gw = fast_gateway
    app = connect(gw)
    rx = receivers.start("down", lambda _req, _n: (500, {}))
    endpoint = endpoints.register(gw, rx.url)
    sid = cloud_session(app)

    enabled_reads: list[int] = []
    deadline = time.monotonic() + 40
    body = endpoint
    while body["status"] == "enabled":
        assert time.monotonic() < deadline, (f"still enabled after {len(rx.requests())} failed attempts: {body}; "
                                             f"consecutive_failures seen {enabled_reads}")
        turn(app, sid)  # events to deliver (each turn: run_started, idled)
        settle = time.monotonic() + 6
        while (body := endpoints.get(gw, endpoint["id"]))["status"] == "enabled" and time.monotonic() < settle:
            enabled_reads.append(body["consecutive_failures"])
            time.sleep(0.1)
    assert all(n < DISABLE_AFTER for n in enabled_reads), f"enabled with >= {DISABLE_AFTER} failures: {enabled_reads}"
    assert body["consecutive_failures"] >= DISABLE_AFTER and body["disabled_at"], body
    attempts = len(rx.requests())
    assert attempts >= DISABLE_AFTER, f"disabled after {attempts} attempts"
    http = endpoints.http(gw)
    listed = {e["id"]: e for e in http.get("/v1/webhooks").json()["data"]}
    assert listed[endpoint["id"]]["status"] == "disabled", listed[endpoint["id"]]

    # Disabled: nothing more is sent.
    time.sleep(0.5)
    quiet = len(rx.requests())
    turn(app, sid)
    time.sleep(1.5)
    assert len(rx.requests()) == quiet, f"delivered to a disabled endpoint: {rx.requests()[quiet:]}"

    # Enabled again: failures reset, deliveries resume.
    r = http.post(f"/v1/webhooks/{endpoint['id']}/enable")
    request_id(r.headers)
    assert r.status_code in (200, 204), f"enable: {r.status_code} {r.text}"
    if r.status_code == 200 and r.content:
        check_webhook_endpoint(r.json(), secret=False)
    enabled = endpoints.get(gw, endpoint["id"])
    assert enabled["status"] == "enabled" and enabled["consecutive_failures"] == 0, enabled
    assert enabled["disabled_at"] is None, enabled
    rx.respond = lambda _req, _n: (200, {})
    seen = len(rx.requests())
    turn(app, sid)
    got = rx.wait(lambda reqs: any(r.status == 200 and r.session_id() == sid for r in reqs[seen:]),
                  "a delivery after enable", 10)
    delivered = next(r for r in got[seen:] if r.status == 200 and r.session_id() == sid)
    check_delivery(delivered, rx.url, endpoint["secret"])
