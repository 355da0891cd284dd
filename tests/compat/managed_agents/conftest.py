"""Fixtures of the Managed Agents compat suite: the official `anthropic` SDK (2.14.0) against a
running gateway at $GATEWAY_URL (tests/compat/run-managed-agents starts one and sets it).

- `client`: the SDK in strict mode, over a transport that records every request and tees every
  SSE body, and checks the `request-id` header of every response (a teardown error otherwise).
- `make_agent`, `make_env`, `make_session`: create through `with_raw_response`, validate the raw
  JSON, return the SDK object.
- `Watch` / `run_turn`: open the stream first, then send, collect until idle; on close every raw
  SSE frame the SDK read is validated too (`event:` == `data.type`, one `data:` line, ...).
- `keyed_gateway`: a second gateway process with an API key (`gateway keys create`).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import anthropic
import httpx2
import pytest

from anthropic.types.beta.sessions import BetaManagedAgentsSendSessionEvents

from helpers import check_event, check_sse_frame, parse_sse, raw, request_id, validate

MODEL = "claude-opus-4-7"
TOOLSET = {"type": "agent_toolset_20260401"}
CLOUD = {"type": "cloud", "networking": {"type": "unrestricted"}}
STREAM_READ_TIMEOUT = 10.0  # seconds without a byte before a stream read fails
TURN_TIMEOUT = 20.0
ROOT = Path(__file__).resolve().parents[3]


def gateway_url() -> str:
    url = os.environ.get("GATEWAY_URL")
    if not url:
        pytest.fail("GATEWAY_URL is not set: run tests/compat/run-managed-agents", pytrace=False)
    return url.rstrip("/")


def gateway_bin() -> str:
    path = os.environ.get("GATEWAY_BIN") or str(
        Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug" / "gateway")
    path = os.path.abspath(path)  # the second gateway runs in its own directory
    if not os.access(path, os.X_OK):
        pytest.fail(f"no gateway binary at {path} (set GATEWAY_BIN)", pytrace=False)
    return path


# --- the recording transport ------------------------------------------------------------------


class _Tee(httpx2.SyncByteStream):
    def __init__(self, inner: Any, sink: bytearray) -> None:
        self.inner, self.sink = inner, sink

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.inner:
            self.sink.extend(chunk)
            yield chunk

    def close(self) -> None:
        self.inner.close()


class Recorder(httpx2.BaseTransport):
    """Counts requests, checks `request-id` on every response, keeps the raw bytes of SSE bodies."""

    def __init__(self) -> None:
        self.inner = httpx2.HTTPTransport()
        self.requests: list[tuple[str, str]] = []
        self.problems: list[str] = []

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append((request.method, request.url.path))
        response = self.inner.handle_request(request)
        rid = response.headers.get("request-id")
        if not (rid and rid.startswith("req_")):
            self.problems.append(f"{request.method} {request.url} -> {response.status_code}: request-id {rid!r}")
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            sink = bytearray()
            response.stream = _Tee(response.stream, sink)
            response.compat_sse = sink  # type: ignore[attr-defined]
        return response

    def close(self) -> None:
        self.inner.close()


def new_client(recorder: Recorder | None = None, **kwargs: Any) -> anthropic.Anthropic:
    options: dict[str, Any] = dict(api_key="test-key", base_url=gateway_url(), max_retries=0, timeout=30,
                                   _strict_response_validation=True)
    options.update(kwargs)
    if recorder is not None:
        options["http_client"] = httpx2.Client(transport=recorder, timeout=30)
    return anthropic.Anthropic(**options)


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    yield rec
    rec.close()
    assert not rec.problems, "responses without a req_ request-id header:\n" + "\n".join(rec.problems)


@pytest.fixture
def client(recorder: Recorder) -> Iterator[anthropic.Anthropic]:
    c = new_client(recorder)
    yield c
    c.close()


# --- resources --------------------------------------------------------------------------------


def create_agent(client: anthropic.Anthropic, **kwargs: Any) -> Any:
    kwargs.setdefault("name", "compat-agent")
    kwargs.setdefault("model", MODEL)
    kwargs.setdefault("tools", [TOOLSET])
    r = client.beta.agents.with_raw_response.create(**kwargs)
    body = raw(r, "agent")
    assert body["version"] == 1
    return r.parse()


def create_env(client: anthropic.Anthropic, **kwargs: Any) -> Any:
    kwargs.setdefault("name", "compat-env")
    kwargs.setdefault("config", CLOUD)
    r = client.beta.environments.with_raw_response.create(**kwargs)
    raw(r, "environment")
    return r.parse()


@pytest.fixture
def make_agent(client: anthropic.Anthropic) -> Callable[..., Any]:
    return lambda **kw: create_agent(client, **kw)


@pytest.fixture
def make_env(client: anthropic.Anthropic) -> Callable[..., Any]:
    return lambda **kw: create_env(client, **kw)


@pytest.fixture
def make_session(client: anthropic.Anthropic) -> Callable[..., Any]:
    def make(agent: Any = None, env: Any = None, **kwargs: Any) -> Any:
        agent = agent if agent is not None else create_agent(client)
        env = env if env is not None else create_env(client)
        agent_ref = kwargs.pop("agent_ref", agent if isinstance(agent, (str, dict)) else agent.id)
        env_id = env if isinstance(env, str) else env.id
        r = client.beta.sessions.with_raw_response.create(agent=agent_ref, environment_id=env_id, **kwargs)
        body = raw(r, "session")
        assert body["environment_id"] == env_id
        return r.parse()

    return make


# --- streams ----------------------------------------------------------------------------------


def user_message(text: str) -> dict:
    return {"type": "user.message", "content": [{"type": "text", "text": text}]}


def is_stop(event: Any) -> bool:
    return event.type in ("session.status_idle", "session.status_terminated")


def is_final_stop(event: Any) -> bool:
    """A stop a client waits beyond: idle for any reason but requires_action, or terminated."""
    if event.type == "session.status_terminated":
        return True
    return event.type == "session.status_idle" and event.stop_reason.type != "requires_action"


class Watch:
    """An SDK stream on a session: opened on construction, so sends after it are seen live."""

    def __init__(self, client: anthropic.Anthropic, session_id: str, deltas: bool = False) -> None:
        self.client, self.session_id = client, session_id
        extra: dict[str, Any] = {"event_deltas": ["agent.message"]} if deltas else {}
        self.stream = client.beta.sessions.events.stream(
            session_id, timeout=httpx2.Timeout(STREAM_READ_TIMEOUT, connect=5.0), **extra)
        request_id(self.stream.response.headers)
        ctype = self.stream.response.headers.get("content-type", "")
        assert ctype.startswith("text/event-stream"), f"stream content-type {ctype!r}"
        self._iter = iter(self.stream)
        self.events: list[Any] = []  # every frame, SDK objects (strictly validated by the client)
        self.sent: list[dict] = []  # send echoes, raw

    def send(self, *events: dict) -> list[dict]:
        r = self.client.beta.sessions.events.with_raw_response.send(self.session_id, events=list(events))
        return check_send(r, events, self.sent)

    def until(self, pred: Callable[[Any], bool], timeout: float = TURN_TIMEOUT) -> list[Any]:
        deadline = time.monotonic() + timeout
        got: list[Any] = []
        for event in self._iter:
            self.events.append(event)
            got.append(event)
            if pred(event):
                return got
            assert time.monotonic() < deadline, f"no matching event within {timeout}s; saw {types(got)}"
        raise AssertionError(f"the stream ended before a matching event; saw {types(got)}")

    def until_stop(self, timeout: float = TURN_TIMEOUT) -> list[Any]:
        return self.until(is_stop, timeout)

    def of_type(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]

    def close(self) -> None:
        self.stream.close()

    def raw_frames(self) -> list[dict]:
        """Every complete raw frame the SDK read, validated; returns their data."""
        sink = getattr(self.stream.response, "compat_sse", None)
        assert sink is not None, "the recording transport did not capture this stream"
        frames, comments = parse_sse(bytes(sink))
        for c in comments:
            assert c.startswith(":"), c
        return [check_sse_frame(f, f"sse frame {i}") for i, f in enumerate(frames)]

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        self.close()
        if exc_type is None:
            data = self.raw_frames()
            assert len(data) >= len(self.events), "the SDK yielded more frames than the wire carried"
            parsed_ids = [getattr(e, "id", None) for e in self.events]
            assert [d.get("id") for d in data[: len(self.events)]] == parsed_ids


def check_send(r: Any, events: Any, log: list[dict] | None = None) -> list[dict]:
    """A send's response: `{"data": [each event echoed with an id]}`, in order."""
    request_id(r.headers)
    assert r.status_code == 200, f"send answered {r.status_code}: {r.text()}"
    body = r.json()
    assert isinstance(body, dict) and isinstance(body.get("data"), list), body
    validate(BetaManagedAgentsSendSessionEvents, body)
    echoed = body["data"]
    assert [e["type"] for e in echoed] == [e["type"] for e in events], echoed
    for e in echoed:
        check_event(e)
    if log is not None:
        log.extend(echoed)
    return echoed


def types(events: list[Any]) -> list[str]:
    return [e["type"] if isinstance(e, dict) else e.type for e in events]


def run_turn(client: anthropic.Anthropic, session_id: str, text: str, deltas: bool = False,
             timeout: float = TURN_TIMEOUT) -> Watch:
    """Opens the stream, sends one user.message, collects until the session stops."""
    with Watch(client, session_id, deltas=deltas) as w:
        w.send(user_message(text))
        w.until_stop(timeout)
    return w


def wait_status(client: anthropic.Anthropic, session_id: str, status: str, timeout: float = TURN_TIMEOUT) -> dict:
    """Polls the session (raw, validated) until it has `status`; returns its body."""
    deadline = time.monotonic() + timeout
    while True:
        body = raw(client.beta.sessions.with_raw_response.retrieve(session_id), "session")
        if body["status"] == status:
            return body
        assert time.monotonic() < deadline, f"session {session_id} still {body['status']!r} after {timeout}s"
        time.sleep(0.1)


# --- gateway processes ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gateway_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(overrides)
    return env


class KeyedGateway:
    def __init__(self, url: str, key: str, proc: subprocess.Popen, workdir: str) -> None:
        self.url, self.key, self.proc, self.workdir = url, key, proc, workdir


@pytest.fixture(scope="session")
def keyed_gateway() -> Iterator[KeyedGateway]:
    """A second gateway in its own directory, with one API key made by `gateway keys create`."""
    binary = gateway_bin()
    workdir = tempfile.mkdtemp(prefix="gateway-compat-keyed.")
    port = free_port()
    env = gateway_env(GATEWAY_LISTEN=f"127.0.0.1:{port}", GATEWAY_LOG__FORMAT="json")
    made = subprocess.run([binary, "keys", "create"], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=60)
    assert made.returncode == 0, f"gateway keys create failed ({made.returncode}): {made.stderr[-2000:]}"
    lines = made.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gwk_"), f"keys create printed {made.stdout!r}"
    log = open(os.path.join(workdir, "gateway.log"), "wb")
    proc = subprocess.Popen([binary, "serve"], cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def log_tail() -> str:
        with open(os.path.join(workdir, "gateway.log"), "rb") as f:
            return f.read()[-3000:].decode("utf-8", "replace")

    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, f"the keyed gateway exited with {proc.returncode}:\n{log_tail()}"
            try:
                if httpx2.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            assert time.monotonic() < deadline, f"the keyed gateway did not become ready within 30s:\n{log_tail()}"
            time.sleep(0.1)
        yield KeyedGateway(url, lines[0], proc, workdir)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)


# --- keep-alive probe -------------------------------------------------------------------------


class KeepAliveProbe:
    """An idle raw stream opened when the suite starts; records comment lines (ADR 0007 §7)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.comments: list[tuple[float, str]] = []
        self.error: BaseException | None = None
        self.seen = threading.Event()
        self.stop = threading.Event()

    def run(self, url: str) -> None:
        try:
            with httpx2.Client(base_url=url, timeout=httpx2.Timeout(30, connect=5)) as http:
                headers = {"authorization": "Bearer test-key", "anthropic-beta": "managed-agents-2026-04-01"}
                agent = http.post("/v1/agents", headers=headers, json={"name": "keepalive", "model": MODEL}).json()
                env = http.post("/v1/environments", headers=headers, json={"name": "keepalive", "config": CLOUD}).json()
                session = http.post("/v1/sessions", headers=headers,
                                    json={"agent": agent["id"], "environment_id": env["id"]}).json()
                path = f"/v1/sessions/{session['id']}/events/stream"
                with http.stream("GET", path, headers={**headers, "accept": "application/json"}) as resp:
                    for line in resp.iter_lines():
                        if line.startswith(":"):
                            self.comments.append((time.monotonic() - self.started, line))
                            self.seen.set()
                        if self.stop.is_set() or self.seen.is_set():
                            return
        except BaseException as e:  # reported by the test that reads the probe
            self.error = e
        finally:
            self.seen.set()


@pytest.fixture(scope="session", autouse=True)
def keepalive_probe() -> Iterator[KeepAliveProbe]:
    probe = KeepAliveProbe()
    if os.environ.get("GATEWAY_URL"):
        threading.Thread(target=probe.run, args=(gateway_url(),), daemon=True).start()
    else:
        probe.seen.set()
    yield probe
    probe.stop.set()
