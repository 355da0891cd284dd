"""Self-hosted environments (DESIGN §5a) driven by the official SDK's own worker:
`AsyncAnthropic(...).beta.environments.work.worker(environment_id=, environment_key=, workdir=).run()`
from anthropic==2.14.0, each in a subprocess of its own (self_hosted_worker.py) so a test can
SIGKILL it.

The tests start their own gateways (`spawn_gateway`): with an API key, so that credentials
matter (the application uses the API key, the worker an environment key made with
`POST /v1/environments/{id}/keys`), a 4 s work-item lease (the worker beats every 2 s) and a
short connect timeout. The events the gateway adds on self-hosted sessions
(`agent.session.requires_action`, `agent.session.environment.<status>`) are not in the SDK's
event union, and a strict SDK client rejects a page or a stream frame holding one, so the logs are
read as raw JSON from `GET /v1/sessions/{id}/events` (every other event is still validated with
the SDK's types). A failed test prints its gateway's log tail and every worker's log.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import anthropic
import httpx2
import pytest
from anthropic.types.beta.environments import BetaSelfHostedWorkQueueStats

from conftest import MODEL, TOOLSET, Recorder, check_send, spawn_gateway, user_message
from helpers import (
    check_environment_key,
    check_error_response,
    check_listed_event,
    check_session,
    check_session_environment,
    raw,
    request_id,
    text_of,
    validate,
)

BETA = "managed-agents-2026-04-01"
TTL = 4  # GATEWAY_ENVIRONMENTS__HEARTBEAT_TTL_SECS: the work-item lease
CONNECT_TIMEOUT = 20  # GATEWAY_ENVIRONMENTS__CONNECT_TIMEOUT_SECS of the main gateway of this module
# The impatient gateway's connect timeout. Not lower: between two empty polls the SDK worker
# sleeps uniform(1, 3) s, so even a worker that is already polling can take ~3 s to claim new
# work; the follow-up turn of the timeout test must not race that.
SHORT_CONNECT_TIMEOUT = 5
POLL_EVERY = 0.25  # seconds between two reads of a session's log
TURN = 25.0  # seconds for a turn that has to wait for a worker to start (python + SDK import, first poll)

MAKE = 'tool:bash {"command": "echo hi > made.txt; pwd"}'
NOTE = "self-hosted note 7"
WRITE = json.dumps({"file_path": "note.txt", "content": NOTE})
READ = json.dumps({"file_path": "note.txt"})
SLOW = 'tool:bash {"command": "echo started >> started.txt; sleep 30"}'
AGAIN = 'tool:bash {"command": "echo again > again.txt"}'
LATE = 'tool:bash {"command": "echo late > late.txt"}'
ON_TIME = 'tool:bash {"command": "echo on-time > on-time.txt"}'
RESULTS = ("user.tool_result", "agent.tool_result")


# --- gateways and the application's clients ----------------------------------------------------


@pytest.fixture(scope="module")
def gateway() -> Iterator[Any]:
    with spawn_gateway("self-hosted", GATEWAY_ENVIRONMENTS__HEARTBEAT_TTL_SECS=str(TTL),
                       GATEWAY_ENVIRONMENTS__CONNECT_TIMEOUT_SECS=str(CONNECT_TIMEOUT)) as gw:
        yield gw


@pytest.fixture(scope="module")
def impatient_gateway() -> Iterator[Any]:
    with spawn_gateway("self-hosted-impatient", GATEWAY_ENVIRONMENTS__HEARTBEAT_TTL_SECS=str(TTL),
                       GATEWAY_ENVIRONMENTS__CONNECT_TIMEOUT_SECS=str(SHORT_CONNECT_TIMEOUT)) as gw:
        yield gw


def bearer(credential: str) -> dict[str, str]:
    return {"authorization": f"Bearer {credential}", "anthropic-beta": BETA}


class App:
    """The application's side of one gateway: the SDK (strict, over the recording transport) and
    raw HTTP, both with the gateway's API key."""

    def __init__(self, gw: Any, recorder: Recorder) -> None:
        assert gw.api_key, "self-hosted tests need a gateway with an API key"
        self.gw = gw
        self.sdk = anthropic.Anthropic(api_key=gw.api_key, base_url=gw.url, max_retries=0, timeout=30,
                                       _strict_response_validation=True,
                                       http_client=httpx2.Client(transport=recorder, timeout=30))
        self.http = httpx2.Client(base_url=gw.url, headers=bearer(gw.api_key), timeout=30)

    def close(self) -> None:
        self.sdk.close()
        self.http.close()

    def environment(self, name: str) -> str:
        body = raw(self.sdk.beta.environments.with_raw_response.create(name=name, config={"type": "self_hosted"}),
                   "environment")
        assert body["config"]["type"] == "self_hosted", body["config"]
        return body["id"]

    def environment_key(self, environment_id: str, name: str = "worker") -> dict:
        r = self.http.post(f"/v1/environments/{environment_id}/keys", json={"name": name})
        request_id(r.headers)
        assert r.status_code == 200, f"POST /v1/environments/{environment_id}/keys: {r.status_code} {r.text}"
        body = check_environment_key(r.json(), environment_id, secret=True)
        assert body["name"] == name and body["revoked_at"] is None, body
        return body

    def session(self, environment_id: str) -> str:
        agent = raw(self.sdk.beta.agents.with_raw_response.create(
            name="self-hosted-agent", model=MODEL, tools=[TOOLSET]), "agent")
        body = raw(self.sdk.beta.sessions.with_raw_response.create(agent=agent["id"], environment_id=environment_id),
                   "session")
        check_session_environment(body)
        return body["id"]

    def session_environment(self, session_id: str) -> dict:
        """`GET /v1/sessions/{id}` (SDK-validated) → its `environment` extension."""
        return check_session_environment(raw(self.sdk.beta.sessions.with_raw_response.retrieve(session_id), "session"))

    def connection_is(self, session_id: str, status: str, timeout: float = 3.0) -> None:
        """The session object's `environment.status` reads `status` (within `timeout`: the event
        that announced it is already in the log)."""
        deadline = time.monotonic() + timeout
        while (env := self.session_environment(session_id))["status"] != status:
            assert time.monotonic() < deadline, f"session.environment is {env}, expected status {status!r}"
            time.sleep(0.1)

    def send(self, session_id: str, text: str) -> str:
        """Sends one user.message; returns its event id (from the send's echo)."""
        event = user_message(text)
        r = self.sdk.beta.sessions.events.with_raw_response.send(session_id, events=[event])
        return check_send(r, [event])[0]["id"]

    def events(self, session_id: str) -> list[dict]:
        """The whole log, raw, every page, each event checked (extensions by shape, others by the SDK)."""
        out: list[dict] = []
        page = None
        while True:
            params: dict[str, Any] = {"limit": 1000}
            if page:
                params["page"] = page
            r = self.http.get(f"/v1/sessions/{session_id}/events", params=params)
            request_id(r.headers)
            assert r.status_code == 200, f"events list: {r.status_code} {r.text}"
            body = r.json()
            assert isinstance(body.get("data"), list), body
            for i, e in enumerate(body["data"]):
                check_listed_event(e, f"event {len(out) + i}")
            out.extend(body["data"])
            page = body.get("next_page")
            if not page:
                return out

    def wait(self, session_id: str, done: Callable[[list[dict]], Any], what: str, timeout: float,
             explain: Callable[[], str] | None = None) -> list[dict]:
        """Re-reads the log until `done(log)` is truthy; returns that log."""
        deadline = time.monotonic() + timeout
        while True:
            log = self.events(session_id)
            if done(log):
                return log
            if time.monotonic() > deadline:
                extra = f"\n{explain()}" if explain else ""
                raise AssertionError(f"{what}: not within {timeout:.0f}s.{extra}\nthe log: {summary(log)}")
            time.sleep(POLL_EVERY)


@pytest.fixture
def connect(recorder: Recorder) -> Iterator[Callable[[Any], App]]:
    made: list[App] = []

    def make(gw: Any) -> App:
        made.append(App(gw, recorder))
        return made[-1]

    yield make
    for app in made:
        app.close()


@pytest.fixture
def app(gateway: Any, connect: Callable[[Any], App]) -> App:
    return connect(gateway)


# --- reading a log -------------------------------------------------------------------------------


def after(log: list[dict], event_id: str) -> list[dict]:
    """The events logged after `event_id`."""
    ids = [e["id"] for e in log]
    assert event_id in ids, f"event {event_id} is not in the session's log"
    return log[ids.index(event_id) + 1:]


def index(events: list[dict], pred: Callable[[dict], bool], what: str) -> int:
    for i, e in enumerate(events):
        if pred(e):
            return i
    raise AssertionError(f"no {what} in {summary(events)}")


def is_final_idle(e: dict) -> bool:
    """A stop the application waits beyond: idle for any reason but requires_action, or terminated."""
    if e["type"] == "session.status_terminated":
        return True
    return e["type"] == "session.status_idle" and e["stop_reason"]["type"] != "requires_action"


def asks_for(environment_id: str) -> Callable[[dict], bool]:
    """`agent.session.requires_action` for a connection to this environment."""
    return lambda e: (e["type"] == "agent.session.requires_action"
                      and e["required_action"].get("type") == "environment_connection"
                      and e["required_action"].get("environment_id") == environment_id)


def is_connection(status: str) -> Callable[[dict], bool]:
    return lambda e: e["type"] == f"agent.session.environment.{status}"


def of_type(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["type"] == kind]


def results_for(events: list[dict], tool_use_id: str) -> list[dict]:
    return [e for e in events if e["type"] in RESULTS and e.get("tool_use_id") == tool_use_id]


def turn_ended(message_id: str) -> Callable[[list[dict]], bool]:
    return lambda log: any(is_final_idle(e) for e in after(log, message_id))


def summary(events: list[dict]) -> str:
    """One line per event, with what tells them apart."""
    out = []
    for e in events:
        kind = e.get("type", "?")
        if kind == "session.status_idle":
            kind += f"({e.get('stop_reason', {}).get('type')})"
        elif kind == "agent.tool_use":
            kind += f"({e.get('name')} {json.dumps(e.get('input'))}, {e.get('id')})"
        elif kind in RESULTS:
            kind += f"(for {e.get('tool_use_id')}, is_error={e.get('is_error')}: {text_of(e)[:80]!r})"
        elif kind in ("agent.message", "user.message"):
            kind += f"({text_of(e)[:80]!r})"
        elif kind == "agent.session.requires_action":
            kind += f"({e.get('required_action')})"
        elif kind.startswith("agent.session.environment."):
            kind += f"({e.get('environment')})"
        elif kind == "session.error":
            kind += f"({e.get('error', {}).get('type')}: {e.get('error', {}).get('message')})"
        out.append(kind)
    return "\n  " + "\n  ".join(out) if out else "(empty)"


def wait_until(check: Callable[[], bool], what: str, timeout: float, explain: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f}s. {explain()}"
        time.sleep(0.1)


def paths(workdir: Path) -> list[str]:
    return sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*"))


def one_call(turn: list[dict], name: str, tool_input: dict) -> dict:
    uses = of_type(turn, "agent.tool_use")
    assert len(uses) == 1, f"expected one agent.tool_use: {summary(turn)}"
    assert uses[0]["name"] == name and uses[0]["input"] == tool_input, uses[0]
    return uses[0]


def worker_result(turn: list[dict], use: dict) -> dict:
    """The single, successful `user.tool_result` the worker posted for `use`."""
    results = results_for(turn, use["id"])
    assert len(results) == 1, f"expected one result for {use['id']}: {summary(turn)}"
    result = results[0]
    assert result["type"] == "user.tool_result", f"the worker answers with user.tool_result, got {result['type']}"
    assert result["is_error"] is False, f"the call failed: {text_of(result)!r}"
    return result


def ends_with_end_turn(turn: list[dict]) -> dict:
    idle = [e for e in turn if is_final_idle(e)][-1]
    assert idle["type"] == "session.status_idle" and idle["stop_reason"]["type"] == "end_turn", summary(turn)
    return idle


# --- the tests -----------------------------------------------------------------------------------


def test_worker_runs_builtin_tools_in_its_workdir(gateway, app, workers):
    env_id = app.environment("self-hosted-tools")
    key = app.environment_key(env_id)["key"]
    sid = app.session(env_id)

    # The message first: with no executor connected the turn asks for one, then waits.
    mid = app.send(sid, MAKE)
    log = app.wait(sid, lambda log: any(asks_for(env_id)(e) for e in after(log, mid)),
                   "agent.session.requires_action {environment_connection} after the message", timeout=10)
    assert not any(is_final_idle(e) for e in after(log, mid)), f"the turn ended without an executor: {summary(log)}"
    app.connection_is(sid, "pending")

    worker = workers.start(gateway.url, env_id, key)
    log = app.wait(sid, turn_ended(mid), "the turn to end once the worker is up", TURN, worker.state)
    turn = after(log, mid)
    use = one_call(turn, "bash", {"command": "echo hi > made.txt; pwd"})
    result = worker_result(turn, use)
    workdir = worker.workdir
    output = text_of(result)
    assert str(workdir) in output or os.path.realpath(workdir) in output, (
        f"bash ran in {output!r}, not in the worker's workdir {workdir}")
    assert (workdir / "made.txt").read_text() == "hi\n", paths(workdir)
    leaked = [str(p) for p in Path(gateway.workdir).rglob("made.txt")]
    assert not leaked, f"the command ran on the gateway's side: {leaked}"
    messages = of_type(turn, "agent.message")
    assert messages and text_of(messages[-1]).startswith("done:"), summary(turn)
    assert str(workdir) in text_of(messages[-1]) or os.path.realpath(workdir) in text_of(messages[-1])
    ends_with_end_turn(turn)
    # The order a user sees: asked for an executor, it connected, it answered the call.
    asked = index(turn, asks_for(env_id), "environment_connection request")
    connected = index(turn, is_connection("connected"), "agent.session.environment.connected")
    answered = turn.index(result)
    assert asked < connected < answered, summary(turn)
    assert turn.index(use) < answered < turn.index(messages[-1]) < turn.index(ends_with_end_turn(turn))
    assert of_type(turn, "agent.session.environment.connected")[0]["environment"]["id"] == env_id
    app.connection_is(sid, "connected")

    # Later turns reuse the connected worker (it stays 60 s after an end_turn): nothing is asked.
    mid = app.send(sid, f"tool:write {WRITE}")
    log = app.wait(sid, turn_ended(mid), "the write turn to end", 15, worker.state)
    turn = after(log, mid)
    assert not any(asks_for(env_id)(e) for e in turn), f"asked again with a worker connected: {summary(turn)}"
    worker_result(turn, one_call(turn, "write", json.loads(WRITE)))
    assert (workdir / "note.txt").read_text() == NOTE
    ends_with_end_turn(turn)

    mid = app.send(sid, f"tool:read {READ}")
    log = app.wait(sid, turn_ended(mid), "the read turn to end", 15, worker.state)
    turn = after(log, mid)
    assert not any(asks_for(env_id)(e) for e in turn), f"asked again with a worker connected: {summary(turn)}"
    result = worker_result(turn, one_call(turn, "read", json.loads(READ)))
    assert NOTE in text_of(result), text_of(result)
    messages = of_type(turn, "agent.message")
    assert messages and text_of(messages[-1]).startswith("done:") and NOTE in text_of(messages[-1]), summary(turn)
    ends_with_end_turn(turn)
    assert worker.alive, worker.state()


def test_killed_worker_fails_the_running_call_and_the_next_input_asks_again(gateway, app, workers):
    env_id = app.environment("self-hosted-kill")
    key = app.environment_key(env_id)["key"]
    sid = app.session(env_id)

    # This time the worker is up first.
    first = workers.start(gateway.url, env_id, key)
    mid = app.send(sid, SLOW)
    log = app.wait(sid, lambda log: of_type(after(log, mid), "agent.tool_use"), "agent.tool_use", TURN, first.state)
    use = one_call(after(log, mid), "bash", json.loads(SLOW[len("tool:bash "):]))
    started = first.workdir / "started.txt"
    wait_until(started.exists, "the worker to start the command", 15, lambda: f"{first.state()}; {paths(first.workdir)}")
    time.sleep(1.0)
    assert first.alive, first.state()
    assert not results_for(app.events(sid), use["id"]), "the 30 s call already has a result"
    first.kill()

    # The lease lapses (TTL) → disconnected; the running call fails; the turn ends.
    def settled(log: list[dict]) -> bool:
        turn = after(log, mid)
        return (any(is_connection("disconnected")(e) for e in turn) and bool(results_for(turn, use["id"]))
                and any(is_final_idle(e) for e in turn))

    log = app.wait(sid, settled, "disconnected + an error result + the turn's end after SIGKILL", TTL + 8)
    turn = after(log, mid)
    results = results_for(turn, use["id"])
    assert len(results) == 1 and results[0]["is_error"] is True, summary(turn)
    disconnected = index(turn, is_connection("disconnected"), "agent.session.environment.disconnected")
    idle = [e for e in turn if is_final_idle(e)][-1]
    assert idle["type"] == "session.status_idle", f"the session must take more input: {summary(turn)}"
    assert turn.index(results[0]) < turn.index(idle), summary(turn)
    assert of_type(turn, "agent.session.environment.disconnected")[0]["environment"]["id"] == env_id
    app.connection_is(sid, "disconnected")
    # A lost executor requests nothing by itself.
    time.sleep(1.0)
    log = app.events(sid)
    assert not any(asks_for(env_id)(e) for e in after(log, turn[disconnected]["id"])), summary(after(log, mid))

    # The next input asks again; a new worker serves it, in its own workdir.
    mid2 = app.send(sid, AGAIN)
    log = app.wait(sid, lambda log: any(asks_for(env_id)(e) for e in after(log, mid2)),
                   "a new agent.session.requires_action {environment_connection}", 10)
    second = workers.start(gateway.url, env_id, key)

    def explain() -> str:
        rerun = " It re-ran the killed call (started.txt is in its workdir)." if (
            second.workdir / "started.txt").exists() else ""
        return f"{second.state()}.{rerun} Its workdir: {paths(second.workdir)}"

    log = app.wait(sid, turn_ended(mid2), "the next turn to end on the new worker", TURN, explain)
    turn2 = after(log, mid2)
    result = worker_result(turn2, one_call(turn2, "bash", {"command": "echo again > again.txt"}))
    assert index(turn2, is_connection("connected"), "agent.session.environment.connected") < turn2.index(result)
    assert (second.workdir / "again.txt").read_text() == "again\n", paths(second.workdir)
    ends_with_end_turn(turn2)
    # The killed call is never re-run: not by the new worker, and it has exactly one result.
    assert not (second.workdir / "started.txt").exists(), "the new worker re-ran the killed call"
    assert started.read_text() == "started\n", "the killed call ran more than once"
    assert len(results_for(log, use["id"])) == 1, summary(log)


def test_environment_key_is_scoped(gateway, app):
    env_a, env_b = app.environment("self-hosted-a"), app.environment("self-hosted-b")
    made = app.environment_key(env_a)
    key_b = app.environment_key(env_b)

    listed = app.http.get(f"/v1/environments/{env_a}/keys")
    request_id(listed.headers)
    assert listed.status_code == 200, listed.text
    items = listed.json()["data"]
    assert made["id"] in [k["id"] for k in items] and key_b["id"] not in [k["id"] for k in items], items
    for item in items:
        check_environment_key(item, env_a, secret=False)

    with httpx2.Client(base_url=gateway.url, headers=bearer(made["key"]), timeout=10) as worker:
        # Env A's queue, before any session exists there (an empty poll is a literal null).
        poll = worker.get(f"/v1/environments/{env_a}/work/poll", headers={"anthropic-worker-id": "compat-scope"})
        request_id(poll.headers)
        assert poll.status_code == 200, f"poll A: {poll.status_code} {poll.text}"
        assert poll.json() is None, f"an empty poll is 200 null, got {poll.text!r}"
        stats = worker.get(f"/v1/environments/{env_a}/work/stats")
        request_id(stats.headers)
        assert stats.status_code == 200, f"stats A: {stats.status_code} {stats.text}"
        validate(BetaSelfHostedWorkQueueStats, stats.json())

        denied(worker.get(f"/v1/environments/{env_b}/work/poll"), "poll of another environment")
        denied(worker.get(f"/v1/environments/{env_b}/work/stats"), "stats of another environment")

        session_a, session_b = app.session(env_a), app.session(env_b)
        got = worker.get(f"/v1/sessions/{session_a}")
        request_id(got.headers)
        assert got.status_code == 200, f"session of A: {got.status_code} {got.text}"
        check_session(got.json())
        assert got.json()["id"] == session_a
        history = worker.get(f"/v1/sessions/{session_a}/events", params={"limit": 1000})
        request_id(history.headers)
        assert history.status_code == 200, f"events of a session of A: {history.status_code} {history.text}"

        denied(worker.get(f"/v1/sessions/{session_b}"), "a session of another environment")
        denied(worker.get(f"/v1/sessions/{session_b}/events"), "the events of a session of another environment")
        denied(worker.get("/v1/agents"), "GET /v1/agents")
        denied(worker.get("/v1/sessions"), "GET /v1/sessions")
        agent_id = got.json()["agent"]["id"]
        denied(worker.post("/v1/sessions", json={"agent": agent_id, "environment_id": env_a}), "POST /v1/sessions")
        denied(worker.post(f"/v1/environments/{env_a}/keys", json={"name": "minted"}), "minting environment keys")

    # A made-up key is no credential; a revoked one stops working.
    with httpx2.Client(base_url=gateway.url, headers=bearer("gwe_not-a-real-key"), timeout=10) as stranger:
        denied(stranger.get(f"/v1/environments/{env_a}/work/poll"), "poll with an unknown key")
    gone = app.http.delete(f"/v1/environments/{env_a}/keys/{made['id']}")
    request_id(gone.headers)
    assert gone.status_code in (200, 204), f"revoke: {gone.status_code} {gone.text}"
    with httpx2.Client(base_url=gateway.url, headers=bearer(made["key"]), timeout=10) as revoked:
        denied(revoked.get(f"/v1/environments/{env_a}/work/poll"), "poll with a revoked key")
        denied(revoked.get(f"/v1/sessions/{session_a}"), "a session with a revoked key")
    with httpx2.Client(base_url=gateway.url, headers=bearer(key_b["key"]), timeout=10) as other:
        r = other.get(f"/v1/environments/{env_b}/work/stats")
        assert r.status_code == 200, f"revoking A's key touched B's: {r.status_code} {r.text}"


def denied(r: httpx2.Response, what: str) -> None:
    assert r.status_code in (401, 403), f"{what} with an environment key: {r.status_code} {r.text[:500]}"
    check_error_response(r, r.status_code, "authentication_error" if r.status_code == 401 else "permission_error")


def test_connect_timeout_fails_the_submission(impatient_gateway, connect, workers):
    gw = impatient_gateway
    app = connect(gw)
    env_id = app.environment("self-hosted-timeout")
    key = app.environment_key(env_id)["key"]
    sid = app.session(env_id)

    sent_at = time.monotonic()
    mid = app.send(sid, LATE)

    def failed(log: list[dict]) -> bool:
        turn = after(log, mid)
        return any(is_connection("failed")(e) for e in turn) and any(is_final_idle(e) for e in turn)

    log = app.wait(sid, failed, "agent.session.environment.failed and the turn's end", SHORT_CONNECT_TIMEOUT + 8)
    waited = time.monotonic() - sent_at
    turn = after(log, mid)
    assert waited >= SHORT_CONNECT_TIMEOUT - 0.5, f"failed after {waited:.1f}s: it did not wait for an executor"
    asked = index(turn, asks_for(env_id), "environment_connection request")
    gave_up = index(turn, is_connection("failed"), "agent.session.environment.failed")
    assert asked < gave_up, summary(turn)
    use = one_call(turn, "bash", {"command": "echo late > late.txt"})
    results = results_for(turn, use["id"])
    assert len(results) == 1 and results[0]["is_error"] is True, f"the call needs an error result: {summary(turn)}"
    idle = [e for e in turn if is_final_idle(e)][-1]
    assert idle["type"] == "session.status_idle", f"the session must take more input: {summary(turn)}"
    app.connection_is(sid, "failed")

    # A late worker never runs the call that timed out...
    worker = workers.start(gw.url, env_id, key)
    time.sleep(5.0)
    assert worker.alive, worker.state()
    assert not (worker.workdir / "late.txt").exists(), "a late worker ran the call that had timed out"
    # ...not even once the next input gives it the session (its history holds the failed call).
    mid2 = app.send(sid, ON_TIME)
    log = app.wait(sid, turn_ended(mid2), "the next turn to end on the late worker", TURN, worker.state)
    turn2 = after(log, mid2)
    worker_result(turn2, one_call(turn2, "bash", {"command": "echo on-time > on-time.txt"}))
    assert (worker.workdir / "on-time.txt").read_text() == "on-time\n", paths(worker.workdir)
    assert not (worker.workdir / "late.txt").exists(), "the worker ran the call that had timed out"
    assert len(results_for(log, use["id"])) == 1, summary(log)
    ends_with_end_turn(turn2)
    app.connection_is(sid, "connected")
