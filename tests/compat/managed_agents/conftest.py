"""Fixtures of the Managed Agents compat suite: the official `anthropic` SDK (2.14.0) against a
running gateway at $GATEWAY_URL (tests/compat/run-managed-agents starts one and sets it).

- `client`: the SDK in strict mode, over a transport that records every request and tees every
  SSE body, and checks the `request-id` header of every response (a teardown error otherwise).
- `make_agent`, `make_env`, `make_session`: create through `with_raw_response`, validate the raw
  JSON, return the SDK object.
- `Watch` / `run_turn`: open the stream first, then send, collect until idle; on close every raw
  SSE frame the SDK read is validated too (`event:` == `data.type`, one `data:` line, ...).
- `keyed_gateway`: a second gateway process with an API key (`gateway keys create`).
- `spawn_gateway(...)`: more gateway processes with settings of their own (test_self_hosted.py);
  `workers`: the official SDK's self-hosted worker in subprocesses (self_hosted_worker.py).
- `receivers`, `endpoints`, `example_handlers` (test_webhooks.py): loopback HTTP servers that
  record webhook deliveries, the gateway's webhook endpoint API (cleaned up after the test), and
  examples/self-hosted/handler.py in subprocesses.
- A failed test shows the logs of any fixture value with `failure_logs()` (those two do).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

import anthropic
import httpx2
import pytest

from anthropic.types.beta.sessions import BetaManagedAgentsSendSessionEvents

from helpers import check_event, check_sse_frame, check_webhook_endpoint, parse_sse, raw, request_id, validate

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

    def __init__(self, keepalive: bool = True) -> None:
        # Without keep-alive every request opens a connection of its own, which a test's
        # round-robin proxy then sends to the next process (test_processes.py).
        self.inner = httpx2.HTTPTransport() if keepalive else \
            httpx2.HTTPTransport(limits=httpx2.Limits(max_connections=100, max_keepalive_connections=0))
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


# --- more gateway processes, self-hosted workers, logs on failure -----------------------------


def file_tail(path: str | os.PathLike[str], limit: int = 8000) -> str:
    """The last `limit` bytes of a file, as text (or why it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError as e:
        return f"(cannot read {path}: {e})"
    prefix = "...\n" if size > limit else ""
    return prefix + data.decode("utf-8", "replace")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    """On a failed phase, appends the logs of every fixture value that has `failure_logs()`
    (a spawned gateway, the workers) to the report, so they print with the failure."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    for value in list(getattr(item, "funcargs", {}).values()):
        try:
            logs = getattr(value, "failure_logs", None)
        except Exception:  # an object whose attribute lookup fails is not one of ours
            continue
        if callable(logs):
            for title, text in logs():
                report.sections.append((title, text))


class GatewayProcess:
    """A gateway a test started in a directory of its own (its ./data/ and gateway.log live there)."""

    def __init__(self, name: str, url: str, api_key: str | None, proc: subprocess.Popen, workdir: str,
                 log_path: str) -> None:
        self.name, self.url, self.api_key, self.proc = name, url, api_key, proc
        self.workdir, self.log_path = workdir, log_path

    def log_tail(self, limit: int = 8000) -> str:
        return file_tail(self.log_path, limit)

    def failure_logs(self) -> list[tuple[str, str]]:
        state = "running" if self.proc.poll() is None else f"exited {self.proc.returncode}"
        return [(f"gateway {self.name} ({state}) log tail, {self.log_path}", self.log_tail())]


@contextlib.contextmanager
def spawn_gateway(name: str, *, api_key: bool = True, **settings: str) -> Iterator[GatewayProcess]:
    """Starts `gateway serve` on a free port in a fresh directory, with the embedded defaults plus
    `settings` (GATEWAY_* variables), JSON logs to ./gateway.log; with `api_key`, first makes one
    with `gateway keys create` (so the gateway requires credentials). Waits for /readyz; on exit
    SIGTERMs it (SIGKILL after 15 s) and removes the directory."""
    binary = gateway_bin()
    workdir = tempfile.mkdtemp(prefix=f"gateway-compat-{name}.")
    port = free_port()
    env = gateway_env(GATEWAY_LISTEN=f"127.0.0.1:{port}", GATEWAY_LOG__FORMAT="json", **settings)
    log_path = os.path.join(workdir, "gateway.log")
    proc: subprocess.Popen | None = None
    log = None
    try:
        key = None
        if api_key:
            made = subprocess.run([binary, "keys", "create"], cwd=workdir, env=env, capture_output=True, text=True,
                                  timeout=60)
            assert made.returncode == 0, f"gateway keys create failed ({made.returncode}): {made.stderr[-2000:]}"
            lines = made.stdout.splitlines()
            assert len(lines) == 1 and lines[0].startswith("gwk_"), f"keys create printed {made.stdout!r}"
            key = lines[0]
        log = open(log_path, "wb")
        proc = subprocess.Popen([binary, "serve"], cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT)
        gw = GatewayProcess(name, f"http://127.0.0.1:{port}", key, proc, workdir, log_path)
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, f"gateway {name} exited with {proc.returncode}:\n{gw.log_tail(3000)}"
            try:
                if httpx2.get(f"{gw.url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            assert time.monotonic() < deadline, f"gateway {name} not ready within 30s:\n{gw.log_tail(3000)}"
            time.sleep(0.1)
        yield gw
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if log is not None:
            log.close()
        shutil.rmtree(workdir, ignore_errors=True)


WORKER_SCRIPT = Path(__file__).resolve().with_name("self_hosted_worker.py")


class WorkerProcess:
    """One official-SDK worker (self_hosted_worker.py): its own process group, workdir and log."""

    def __init__(self, name: str, proc: subprocess.Popen, workdir: Path, log_path: Path) -> None:
        self.name, self.proc, self.workdir, self.log_path = name, proc, workdir, log_path

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL to the whole process group: the worker and the bash (and its children) it runs."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def state(self) -> str:
        return f"worker {self.name} " + ("running" if self.alive else f"exited {self.proc.returncode}")

    def log_tail(self, limit: int = 8000) -> str:
        return file_tail(self.log_path, limit)


class Workers:
    """Starts workers; at teardown kills every one still running (and its process group)."""

    def __init__(self) -> None:
        # Short paths: bash's `pwd` ends up quoted in `done: <first 200 chars>`.
        self.root = Path(tempfile.mkdtemp(prefix="shw."))
        self.started: list[WorkerProcess] = []

    def start(self, url: str, environment_id: str, environment_key: str) -> WorkerProcess:
        name = f"w{len(self.started) + 1}"
        base = self.root / name
        workdir = base / "work"
        workdir.mkdir(parents=True)
        log_path = base / "worker.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "GATEWAY_"))}
        env.update(SELF_HOSTED_ENVIRONMENT_KEY=environment_key, PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([sys.executable, str(WORKER_SCRIPT), url, environment_id, str(workdir)],
                                    cwd=base, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        worker = WorkerProcess(name, proc, workdir, log_path)
        self.started.append(worker)
        return worker

    def failure_logs(self) -> list[tuple[str, str]]:
        return [(f"{w.state()} log tail, {w.log_path}", w.log_tail()) for w in self.started]

    def close(self) -> None:
        for w in self.started:
            w.kill()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def workers() -> Iterator[Workers]:
    pool = Workers()
    try:
        yield pool
    finally:
        pool.close()


# --- webhooks: receivers, endpoints, the example handler (test_webhooks.py) -------------------


class Received:
    """One HTTP request a `WebhookReceiver` got, and what it answered."""

    def __init__(self, at: float, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        self.at, self.method, self.path, self.headers, self.body = at, method, path, headers, body
        self.status: int | None = None

    @property
    def webhook_id(self) -> str | None:
        return self.headers.get("webhook-id")

    def json(self) -> Any:
        return json.loads(self.body)

    def kind(self) -> str | None:
        try:
            return self.json()["data"]["type"]
        except Exception:
            return None

    def session_id(self) -> str | None:
        try:
            return self.json()["data"]["id"]
        except Exception:
            return None

    def __repr__(self) -> str:
        return (f"<{self.method} {self.path} {self.webhook_id} {self.kind()} {self.session_id()} "
                f"-> {self.status} at +{self.at:.2f}s>")


Responder = Callable[[Received, int], "tuple[int, dict[str, str]]"]


class WebhookReceiver:
    """A tiny HTTP server on a free loopback port that a test registers as a webhook endpoint.
    Records every request; answers what `respond(request, attempt)` returns, `attempt` being the
    1-based count of requests with that `webhook-id` so far (default: 200)."""

    def __init__(self, name: str, respond: Responder | None = None) -> None:
        self.name = name
        self.respond: Responder = respond or (lambda _r, _n: (200, {}))
        self.started = time.monotonic()
        self.received: list[Received] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                req = Received(time.monotonic() - receiver.started, self.command, self.path,
                               {k.lower(): v for k, v in self.headers.items()}, body)
                with receiver._lock:
                    attempt = 1 + sum(1 for r in receiver.received
                                      if req.webhook_id is not None and r.webhook_id == req.webhook_id)
                    receiver.received.append(req)
                try:
                    status, headers = receiver.respond(req, attempt)
                except Exception:  # a broken script answers 599, which a test will notice
                    status, headers = 599, {}
                req.status = status
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_POST = do_GET = do_PUT = _any

            def log_message(self, *_: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name=f"receiver-{name}", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/{self.name}"

    def requests(self, pred: Callable[[Received], bool] = lambda _r: True) -> list[Received]:
        with self._lock:
            return [r for r in self.received if pred(r)]

    def wait(self, done: Callable[[list[Received]], Any], what: str, timeout: float) -> list[Received]:
        """Waits until `done(every request so far)` is truthy; returns the requests."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.requests()
            if done(got):
                return got
            assert time.monotonic() < deadline, f"receiver {self.name}: {what}: not within {timeout:.0f}s; got {got}"
            time.sleep(0.05)

    def failure_logs(self) -> list[tuple[str, str]]:
        return [(f"webhook receiver {self.name} ({self.url})", "\n".join(map(repr, self.requests())) or "(nothing)")]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Receivers:
    def __init__(self) -> None:
        self.started: list[WebhookReceiver] = []

    def start(self, name: str, respond: Responder | None = None) -> WebhookReceiver:
        self.started.append(WebhookReceiver(name, respond))
        return self.started[-1]

    def failure_logs(self) -> list[tuple[str, str]]:
        return [log for r in self.started for log in r.failure_logs()]

    def close(self) -> None:
        for r in self.started:
            r.close()


@pytest.fixture
def receivers() -> Iterator[Receivers]:
    pool = Receivers()
    try:
        yield pool
    finally:
        pool.close()


class WebhookEndpoints:
    """The webhook extension API of one or more gateways (with their API key); deletes every
    endpoint it registered at teardown, so later tests on a shared gateway get no strays."""

    BETA = "managed-agents-2026-04-01"

    def __init__(self) -> None:
        self.clients: dict[str, httpx2.Client] = {}
        self.made: list[tuple[str, str]] = []  # (gateway url, endpoint id)

    def http(self, gw: Any) -> httpx2.Client:
        if gw.url not in self.clients:
            headers = {"authorization": f"Bearer {gw.api_key}", "anthropic-beta": self.BETA}
            self.clients[gw.url] = httpx2.Client(base_url=gw.url, headers=headers, timeout=30)
        return self.clients[gw.url]

    def register(self, gw: Any, url: str, event_types: list[str] | None = None, **extra: Any) -> dict:
        """`POST /v1/webhooks`; asserts 200 and the shape; returns the body (with `secret`)."""
        body: dict[str, Any] = {"url": url, **extra}
        if event_types is not None:
            body["event_types"] = event_types
        r = self.http(gw).post("/v1/webhooks", json=body)
        request_id(r.headers)
        assert r.status_code == 200, f"POST /v1/webhooks {body}: {r.status_code} {r.text[:1000]}"
        made = check_webhook_endpoint(r.json(), secret=True)
        self.made.append((gw.url, made["id"]))
        assert made["url"] == url and made["status"] == "enabled" and made["consecutive_failures"] == 0, made
        assert made["disabled_at"] is None, made
        return made

    def get(self, gw: Any, endpoint_id: str) -> dict:
        r = self.http(gw).get(f"/v1/webhooks/{endpoint_id}")
        request_id(r.headers)
        assert r.status_code == 200, f"GET /v1/webhooks/{endpoint_id}: {r.status_code} {r.text[:1000]}"
        return check_webhook_endpoint(r.json(), secret=False)

    def close(self) -> None:
        for url, endpoint_id in self.made:
            try:
                self.clients[url].delete(f"/v1/webhooks/{endpoint_id}")
            except httpx2.HTTPError:
                pass  # the gateway is already gone
        for c in self.clients.values():
            c.close()


@pytest.fixture
def endpoints() -> Iterator[WebhookEndpoints]:
    api = WebhookEndpoints()
    try:
        yield api
    finally:
        api.close()


EXAMPLE_HANDLER = ROOT / "examples" / "self-hosted" / "handler.py"


class ExampleHandler:
    """examples/self-hosted/handler.py in a subprocess: its URL, its WORKDIR_ROOT and its log."""

    def __init__(self, name: str, proc: subprocess.Popen, port: int, root: Path, log_path: Path,
                 secrets: list[str]) -> None:
        self.name, self.proc, self.port, self.root, self.log_path = name, proc, port, root, log_path
        self.workdir_root = root / "sessions"
        self.secrets = secrets
        self.url = f"http://127.0.0.1:{port}"
        self.executor_pids: set[int] = set()

    @property
    def webhook_url(self) -> str:
        return f"{self.url}/webhooks"

    def state(self) -> dict:
        r = httpx2.get(f"{self.url}/state", timeout=10)
        assert r.status_code == 200, f"GET /state: {r.status_code} {r.text}"
        body = r.json()
        for ex in body["executors"].values():
            if ex.get("pid"):
                self.executor_pids.add(ex["pid"])
        return body

    def post(self, body: str | bytes, headers: dict[str, str]) -> httpx2.Response:
        return httpx2.post(self.webhook_url, content=body, headers=headers, timeout=30)

    def children(self) -> list[int]:
        """Pids of the processes whose parent is the handler (its executors), from /proc."""
        out = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z" and int(fields[1]) == self.proc.pid:
                out.append(int(entry))
        return sorted(out)

    def log_tail(self, limit: int = 12000) -> str:
        return file_tail(self.log_path, limit)

    def log_text(self) -> str:
        return self.log_path.read_text("utf-8", "replace")

    def describe(self) -> str:
        alive = "running" if self.proc.poll() is None else f"exited {self.proc.returncode}"
        try:
            state = self.state() if self.proc.poll() is None else "(gone)"
        except Exception as e:
            state = f"(GET /state failed: {e})"
        return f"example handler {self.name} {alive}; state {state}"

    def failure_logs(self) -> list[tuple[str, str]]:
        return [(f"{self.describe()}; log tail, {self.log_path}", self.log_tail())]

    def close(self) -> None:
        if self.proc.poll() is None:
            # Remember the executors (each leads its process group), to kill any left behind.
            self.executor_pids.update(self.children())
            try:
                self.state()
            except Exception:
                pass
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in self.executor_pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


class ExampleHandlers:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="wh-example."))
        self.started: list[ExampleHandler] = []

    def start(self, gateway_url: str, api_key: str, environment_id: str, environment_key: str, secret: str,
              port: int | None = None, ready_timeout: float = 30.0) -> ExampleHandler:
        name = f"h{len(self.started) + 1}"
        base = self.root / name
        base.mkdir(parents=True)
        port = port or free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "GATEWAY_"))}
        env.update(GATEWAY_URL=gateway_url, GATEWAY_API_KEY=api_key, ENVIRONMENT_ID=environment_id,
                   ENVIRONMENT_KEY=environment_key, WEBHOOK_SECRET=secret, LISTEN=f"127.0.0.1:{port}",
                   WORKDIR_ROOT=str(base / "sessions"), PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
        log_path = base / "handler.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([sys.executable, str(EXAMPLE_HANDLER)], cwd=base, env=env,
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        handler = ExampleHandler(name, proc, port, base, log_path, [api_key, environment_key, secret])
        self.started.append(handler)
        deadline = time.monotonic() + ready_timeout
        while True:
            assert proc.poll() is None, f"the example handler exited with {proc.returncode}:\n{handler.log_tail()}"
            try:
                if httpx2.get(f"{handler.url}/healthz", timeout=2).status_code == 200:
                    return handler
            except httpx2.TransportError:
                pass
            assert time.monotonic() < deadline, f"the example handler did not answer within {ready_timeout:.0f}s:\n" \
                                                f"{handler.log_tail()}"
            time.sleep(0.1)

    def failure_logs(self) -> list[tuple[str, str]]:
        return [log for h in self.started for log in h.failure_logs()]

    def close(self) -> None:
        for h in self.started:
            h.close()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def example_handlers() -> Iterator[ExampleHandlers]:
    pool = ExampleHandlers()
    try:
        yield pool
    finally:
        pool.close()
