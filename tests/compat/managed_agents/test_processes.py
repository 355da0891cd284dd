"""Several gateway processes, run as operators run them (docs/ops/several-processes.md): two
`gateway serve` processes on one fresh PostgreSQL database, with the same secret key, their
own host ids and data dirs and a 2 s worker lease, behind a round-robin TCP proxy that sends
each new connection to the next process and skips one that refuses (as a load balancer's
health check would). The official SDK talks to the proxy without keep-alive, so consecutive
requests alternate between the processes, and the proxy's record says where each one landed.

- A stream on one process shows the previews of a turn the other runs (ADR 0004): the
  processes' own /metrics say which one ran it, so the relay is the only way the deltas came.
- The process a client streams from is SIGKILLed mid-turn, the turn going on on the other
  (test 2), or with the turn (test 3: the survivor takes it over once the lease lapses); the
  client reconnects through the proxy with `Last-Event-ID` and sees every event of the
  session's log once, in order.

Needs PostgreSQL at $GATEWAY_TEST_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test;
each test makes a database of its own with `psql` and drops it). A failed test prints both
gateways' log tails and the proxy's routes.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import socket
import subprocess
import threading
import time
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

import anthropic
import httpx2
import pytest

from conftest import (
    STREAM_READ_TIMEOUT,
    GatewayProcess,
    Recorder,
    Watch,
    create_agent,
    create_env,
    is_final_stop,
    new_client,
    spawn_gateway,
    types,
    user_message,
)
from helpers import check_sse_frame, parse_sse, raw, text_of

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/test"
LEASE_SECS = 2
# ADR 0004: the process running a turn relays previews only to processes it has heard watch
# the session, one NOTIFY after the stream opened; a client that sends at that very moment may
# miss its first message's previews. A person typing is far slower than this pause.
INTEREST_PAUSE = 0.3
WORDS = ["one", "two", "three", "four", "five", "six"]
DRIP = f"drip:150 {' '.join(WORDS)}"  # a word per chunk, 150 ms apart (gateway/models/src/fake.rs)
ROUNDS = 4
TOOLS = "\nthen ".join(f"tool:bash {json.dumps({'command': f'sleep 0.4; echo round {i}'})}"
                       for i in range(1, ROUNDS + 1))
SLOW_WORDS = [f"w{i}" for i in range(1, 9)]
SLOW_DRIP = f"drip:250 {' '.join(SLOW_WORDS)}"  # 1.75 s of model output
TEST_DEADLINE = 30.0


# --- the database ------------------------------------------------------------------------------


def psql(url: str, sql: str) -> None:
    done = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", url, "-c", sql], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, f"psql {sql!r} failed ({done.returncode}): {done.stderr.strip()}"


@contextlib.contextmanager
def fresh_database() -> Iterator[str]:
    """A new database on the test server; dropped at exit, connections or not."""
    server = os.environ.get("GATEWAY_TEST_DATABASE_URL") or DEFAULT_DATABASE_URL
    name = f"gwt_compat_{secrets.token_hex(6)}"
    try:
        psql(server, f"CREATE DATABASE {name}")
    except (AssertionError, OSError) as e:
        pytest.fail(f"these tests need PostgreSQL at {server} (GATEWAY_TEST_DATABASE_URL): {e}", pytrace=False)
    try:
        yield urlsplit(server)._replace(path=f"/{name}").geturl()
    finally:
        psql(server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# --- the load balancer -------------------------------------------------------------------------


class Route:
    """One client connection: the backend it went to, those that refused it, its request line."""

    def __init__(self, n: int, backend: str | None, skipped: list[str]) -> None:
        self.n, self.backend, self.skipped = n, backend, skipped
        self.request_line: str | None = None
        self.at = time.monotonic()

    def __repr__(self) -> str:
        skipped = f" (refused by {', '.join(self.skipped)})" if self.skipped else ""
        return f"#{self.n} {self.request_line!r} -> {self.backend}{skipped}"


class RoundRobinProxy:
    """A TCP proxy on a free loopback port: each accepted connection goes to the next backend in
    turn; a backend that refuses the connection is skipped. Bytes are copied both ways until
    either side closes, and then both are closed, so a client of a killed backend sees its
    connection break as it would behind a real load balancer."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.backends: list[tuple[str, int]] = []  # (name, port), set once the gateways listen
        self.routes: list[Route] = []
        self._next = 0
        self._open: set[socket.socket] = set()
        threading.Thread(target=self._accept, name="round-robin-proxy", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self._route(client)

    def _route(self, client: socket.socket) -> None:
        skipped: list[str] = []
        for _ in range(len(self.backends)):
            name, port = self.backends[self._next % len(self.backends)]
            self._next += 1
            try:
                upstream = socket.create_connection(("127.0.0.1", port), timeout=2)
            except OSError:
                skipped.append(name)
                continue
            upstream.settimeout(None)
            route = Route(len(self.routes), name, skipped)
            self.routes.append(route)
            self._open.update((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream, route), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, None), daemon=True).start()
            return
        self.routes.append(Route(len(self.routes), None, skipped))
        client.close()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, route: Route | None) -> None:
        head = b""
        try:
            while data := src.recv(65536):
                if route is not None and route.request_line is None:
                    head += data
                    if b"\r\n" in head or len(head) > 8192:
                        route.request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def route_of(self, method: str, path: str) -> Route:
        """The one connection that carried a request for `path` (the query aside)."""
        found = [r for r in self.routes if r.request_line and r.request_line.split(" ")[:1] == [method]
                 and r.request_line.split(" ")[1].split("?")[0] == path]
        assert len(found) == 1, f"{method} {path} should have gone through the proxy once: {self.routes}"
        return found[0]

    def failure_logs(self) -> list[tuple[str, str]]:
        return [("round-robin proxy routes", "\n".join(map(repr, self.routes)) or "(none)")]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for s in list(self._open):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


# --- two processes on one database --------------------------------------------------------------


class Cluster:
    """Two gateway processes on one database, and the proxy in front of them."""

    def __init__(self, proxy: RoundRobinProxy, gateways: list[GatewayProcess]) -> None:
        self.proxy, self.gateways = proxy, gateways
        self.key = gateways[0].api_key  # made by `gateway keys create` in the shared database

    def by_name(self, name: str | None) -> GatewayProcess:
        found = [g for g in self.gateways if g.name == name]
        assert found, f"no gateway named {name!r}"
        return found[0]

    def metrics(self, gw: GatewayProcess) -> dict[str, float]:
        """One process's /metrics, read directly (not through the proxy): series -> value."""
        r = httpx2.get(f"{gw.url}/metrics", headers={"authorization": f"Bearer {self.key}"}, timeout=10)
        assert r.status_code == 200, f"GET {gw.url}/metrics: {r.status_code} {r.text[:500]}"
        out: dict[str, float] = {}
        for line in r.text.splitlines():
            if line and not line.startswith("#"):
                series, _, value = line.rpartition(" ")
                out[series] = float(value)
        return out

    def kill(self, gw: GatewayProcess) -> None:
        gw.proc.kill()
        gw.proc.wait(timeout=10)

    def failure_logs(self) -> list[tuple[str, str]]:
        return [log for g in self.gateways for log in g.failure_logs()] + self.proxy.failure_logs()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with contextlib.ExitStack() as stack:
        database = stack.enter_context(fresh_database())
        proxy = RoundRobinProxy()
        stack.callback(proxy.close)
        shared = dict(
            GATEWAY_DATABASE_URL=database,
            GATEWAY_SECRET_KEY=base64.b64encode(os.urandom(32)).decode(),
            GATEWAY_PUBLIC_URL=proxy.url,
            GATEWAY_WORKERS__LEASE_SECS=str(LEASE_SECS),
            GATEWAY_WORKERS__SHUTDOWN_GRACE_SECS="1",
        )
        # One after the other: the first migrates the database (and makes the API key).
        a = stack.enter_context(spawn_gateway("a", api_key=True, GATEWAY_HOST_ID="host-a", **shared))
        b = stack.enter_context(spawn_gateway("b", api_key=False, GATEWAY_HOST_ID="host-b", **shared))
        proxy.backends = [(g.name, int(g.url.rsplit(":", 1)[1])) for g in (a, b)]
        yield Cluster(proxy, [a, b])


@pytest.fixture
def sdk(cluster: Cluster) -> Iterator[anthropic.Anthropic]:
    """The official SDK through the proxy, a new connection per request."""
    recorder = Recorder(keepalive=False)
    client = new_client(recorder, base_url=cluster.proxy.url, api_key=cluster.key)
    yield client
    client.close()
    assert not recorder.problems, "responses without a req_ request-id header:\n" + "\n".join(recorder.problems)


def new_session(sdk: anthropic.Anthropic) -> str:
    """Three requests: agent, environment, session."""
    agent = create_agent(sdk, name="processes")
    env = create_env(sdk, name="processes")
    return raw(sdk.beta.sessions.with_raw_response.create(agent=agent.id, environment_id=env.id), "session")["id"]


def grew(before: dict[str, float], after: dict[str, float], series: str) -> float:
    return after.get(series, 0.0) - before.get(series, 0.0)


CLAIMED = "gateway_runs_claimed_total"
RECLAIMED = "gateway_runs_reclaimed_total"
COMPLETED = 'gateway_runs_settled_total{outcome="completed"}'
PEER_SENT = "gateway_store_peer_messages_sent_total"


# --- a client that follows a session across connections ------------------------------------------


PREVIEWS = ("event_start", "event_delta")


def is_end_turn(event: Any) -> bool:
    return event.type == "session.status_idle" and event.stop_reason.type == "end_turn"


class Follower:
    """Follows a session's log over SDK streams as a UI does: when a connection breaks, it
    reconnects with `Last-Event-ID`, the id of the last committed event it saw."""

    def __init__(self, sdk: anthropic.Anthropic, proxy: RoundRobinProxy, session_id: str,
                 deltas: bool = False) -> None:
        self.sdk, self.proxy, self.session_id = sdk, proxy, session_id
        self.extra: dict[str, Any] = {"event_deltas": ["agent.message"]} if deltas else {}
        self.frames: list[Any] = []  # previews included
        self.connections: list[tuple[Route, Any, list[Any]]] = []  # (route, SDK stream, its events)
        self.breaks: list[str] = []

    @property
    def events(self) -> list[Any]:
        """The committed events seen, in order."""
        return [e for e in self.frames if e.type not in PREVIEWS]

    def open(self) -> Route:
        headers = {"Last-Event-ID": self.events[-1].id} if self.events else None
        stream = self.sdk.beta.sessions.events.stream(
            self.session_id, extra_headers=headers, timeout=httpx2.Timeout(STREAM_READ_TIMEOUT, connect=5.0),
            **self.extra)
        route = self.proxy.routes[-1]
        assert route.request_line and "/events/stream" in route.request_line, self.proxy.routes
        self.connections.append((route, stream, []))
        self._iter = iter(stream)
        return route

    def read(self, stop: Callable[[Any], bool]) -> bool:
        """Reads the open connection until `stop(event)` (True), or until it breaks or ends
        (False, closed)."""
        _, stream, mine = self.connections[-1]
        try:
            for event in self._iter:
                self.frames.append(event)
                mine.append(event)
                if stop(event):
                    return True
        except httpx2.TransportError as e:
            self.breaks.append(f"{type(e).__name__}: {e}")
        stream.close()
        return False

    def until(self, stop: Callable[[Any], bool], deadline: float) -> None:
        """Reads, reconnecting when a connection breaks, until `stop`."""
        while not self.read(stop):
            assert time.monotonic() < deadline, f"no stop event in time; saw {types(self.frames)}"
            time.sleep(0.5)  # a client's reconnect backoff: events commit meanwhile
            self.open()

    def check_wire(self) -> None:
        """Every complete raw frame of every connection validates, and is what the SDK yielded."""
        for route, stream, mine in self.connections:
            frames, _ = parse_sse(bytes(stream.response.compat_sse))
            data = [check_sse_frame(f, f"{route} frame {i}") for i, f in enumerate(frames)]
            assert [d.get("id") for d in data] == [getattr(e, "id", None) for e in mine], (
                f"{route}: the wire and the SDK disagree")


def listed_ids(sdk: anthropic.Anthropic, session_id: str) -> list[str]:
    """Every event of the session, through the SDK's auto-pagination."""
    return [e.id for e in sdk.beta.sessions.events.list(session_id)]


def check_seen_once_in_order(follower: Follower, listed: list[str]) -> None:
    seen = [e.id for e in follower.events]
    assert len(set(seen)) == len(seen), f"an event streamed twice: {seen}"
    assert [i for i in seen if i in set(listed)] == listed, (
        f"every listed event streamed once, in order:\nstreamed {types(follower.events)}\nlisted {listed}")


def check_resumed_on_the_survivor(follower: Follower, cluster: Cluster, x: GatewayProcess, y: GatewayProcess,
                                  killed_at: float, listed: list[str]) -> None:
    """After X died: one break, one reconnect, everything since went to Y (X refused by the
    proxy), and every listed event was streamed once, in order, as the wire says."""
    assert len(follower.connections) == 2 and len(follower.breaks) == 1, (follower.breaks, cluster.proxy.routes)
    assert all(r.backend == y.name for r in cluster.proxy.routes if r.at >= killed_at), cluster.proxy.routes
    assert any(x.name in r.skipped for r in cluster.proxy.routes), f"{x.name} was never refused: {cluster.proxy.routes}"
    check_seen_once_in_order(follower, listed)
    follower.check_wire()


# --- the tests ---------------------------------------------------------------------------------


def test_a_stream_on_one_process_shows_the_deltas_of_a_turn_the_other_runs(cluster: Cluster, sdk: Any) -> None:
    sid = new_session(sdk)
    before = {g.name: cluster.metrics(g) for g in cluster.gateways}
    arrivals: list[tuple[float, Any]] = []

    def stop_and_time(event: Any) -> bool:
        arrivals.append((time.monotonic(), event))
        return is_final_stop(event)

    with Watch(sdk, sid, deltas=True) as w:
        time.sleep(INTEREST_PAUSE)
        w.send(user_message(DRIP))
        w.until(stop_and_time)
    stream = cluster.proxy.route_of("GET", f"/v1/sessions/{sid}/events/stream")
    send = cluster.proxy.route_of("POST", f"/v1/sessions/{sid}/events")
    assert stream.backend != send.backend, f"the stream and the send went to one process: {cluster.proxy.routes}"
    x, y = cluster.by_name(stream.backend), cluster.by_name(send.backend)

    # Which process ran the turn, by each one's own counters: Y (whose admission took it), not X.
    after = {g.name: cluster.metrics(g) for g in cluster.gateways}
    ran = {g.name: (grew(before[g.name], after[g.name], CLAIMED), grew(before[g.name], after[g.name], COMPLETED))
           for g in cluster.gateways}
    assert ran[y.name] == (1, 1) and ran[x.name] == (0, 0), f"(claimed, completed) by process: {ran}"

    # What the SDK user sees: the preview opens, the words arrive in order, once each, the
    # first well before the committed message, whose text they add up to; then the turn ends.
    events = [e for _, e in arrivals]
    kinds = types(events)
    messages = [e for e in events if e.type == "agent.message"]
    assert len(messages) == 1 and text_of(messages[0]) == " ".join(WORDS), kinds
    message = messages[0]
    starts = [i for i, e in enumerate(events) if e.type == "event_start"]
    assert len(starts) == 1, f"one event_start: {kinds}"
    assert events[starts[0]].event.type == "agent.message" and events[starts[0]].event.id == message.id
    deltas = [(t, e) for t, e in arrivals if e.type == "event_delta"]
    assert [e.event_id for _, e in deltas] == [message.id] * len(WORDS), f"every word once: {kinds}"
    assert "".join(e.delta.content.text for _, e in deltas) == text_of(message)
    at = [i for i, k in enumerate(kinds) if k == "event_delta"]
    assert starts[0] < at[0] and at[-1] < kinds.index("agent.message"), kinds
    committed_at = next(t for t, e in arrivals if e.type == "agent.message")
    early = committed_at - deltas[0][0]
    assert early >= 0.4, f"the first delta came only {early:.3f}s before the committed message"
    assert is_end_turn(events[-1]), kinds
    ids = [e.id for e in events if e.type not in PREVIEWS]
    assert len(set(ids)) == len(ids), f"a committed event twice: {kinds}"

    # The previews crossed over PostgreSQL: Y sent at least one peer message per preview frame
    # (X ran nothing, so its stream had them from nowhere else; the counts above prove that).
    sent = grew(before[y.name], after[y.name], PEER_SENT)
    assert sent >= 1 + len(WORDS), f"{y.name} sent {sent} messages to its peers"


def test_a_client_of_a_killed_process_resumes_on_the_one_running_its_turn(cluster: Cluster, sdk: Any) -> None:
    deadline = time.monotonic() + TEST_DEADLINE
    sid = new_session(sdk)
    follower = Follower(sdk, cluster.proxy, sid)
    stream = follower.open()
    before = {g.name: cluster.metrics(g) for g in cluster.gateways}
    sdk.beta.sessions.events.send(sid, events=[user_message(TOOLS)])
    send = cluster.proxy.route_of("POST", f"/v1/sessions/{sid}/events")
    assert stream.backend != send.backend, f"the stream and the send went to one process: {cluster.proxy.routes}"
    x, y = cluster.by_name(stream.backend), cluster.by_name(send.backend)

    # A few committed events in (the first tool round's result), X dies under the open stream.
    assert follower.read(lambda e: e.type == "agent.tool_result"), f"X's stream ended: {types(follower.events)}"
    cluster.kill(x)
    killed_at = time.monotonic()
    follower.until(is_end_turn, deadline)

    after_kill = [r for r in cluster.proxy.routes if r.at >= killed_at]
    assert after_kill[0] is follower.connections[1][0] and after_kill[0].backend == y.name, after_kill
    check_resumed_on_the_survivor(follower, cluster, x, y, killed_at, listed_ids(sdk, sid))
    kinds = types(follower.events)
    assert kinds.count("agent.tool_use") == kinds.count("agent.tool_result") == ROUNDS, f"each round once: {kinds}"
    messages = [text_of(e) for e in follower.events if e.type == "agent.message"]
    assert len(messages) == 1 and messages[0].startswith(f"done: round {ROUNDS}"), (messages, kinds)
    assert kinds.count("session.status_idle") == 1 and is_end_turn(follower.events[-1]), kinds
    after = cluster.metrics(y)
    ran = [grew(before[y.name], after, s) for s in (CLAIMED, COMPLETED, RECLAIMED)]
    assert ran == [1, 1, 0], f"{y.name} ran the turn through, no takeover (claimed, completed, reclaimed): {ran}"


def test_a_process_killed_with_its_turn_and_its_client_loses_and_repeats_nothing(cluster: Cluster,
                                                                                 sdk: Any) -> None:
    deadline = time.monotonic() + TEST_DEADLINE
    sid = new_session(sdk)
    follower = Follower(sdk, cluster.proxy, sid, deltas=True)
    stream = follower.open()
    sdk.beta.sessions.retrieve(sid)  # so that the send goes where the stream went
    before = {g.name: cluster.metrics(g) for g in cluster.gateways}
    sdk.beta.sessions.events.send(sid, events=[user_message(SLOW_DRIP)])
    send = cluster.proxy.route_of("POST", f"/v1/sessions/{sid}/events")
    assert stream.backend == send.backend, f"the stream and the send went apart: {cluster.proxy.routes}"
    x = cluster.by_name(stream.backend)
    y = next(g for g in cluster.gateways if g is not x)

    # X dies two words into the model's answer (1.75 s of it), long before the message commits.
    # (Not at span.model_request_start: that commits with the round's output, not before it.)
    deltas = iter(range(2))
    assert follower.read(lambda e: e.type == "event_delta" and next(deltas, 1) == 1), types(follower.frames)
    cluster.kill(x)
    killed_at = time.monotonic()
    assert "agent.message" not in types(follower.frames), types(follower.frames)
    follower.until(is_end_turn, deadline)

    check_resumed_on_the_survivor(follower, cluster, x, y, killed_at, listed_ids(sdk, sid))
    kinds = types(follower.events)
    messages = [e for e in follower.events if e.type == "agent.message"]
    assert [text_of(m) for m in messages] == [" ".join(SLOW_WORDS)], kinds
    assert kinds.count("session.status_idle") == 1 and is_end_turn(follower.events[-1]), kinds
    # The survivor asked the model again, and its previews reached the resumed stream whole.
    # (The preview X had opened is never concluded: its message never commits, and neither does
    # a span.model_request_end for its request, whose start rode with that uncommitted output.)
    frames = follower.connections[1][2]
    previewed = [e.event.id for e in frames if e.type == "event_start"]
    assert previewed == [messages[0].id], f"one preview, of the committed message: {types(frames)}"
    assert "".join(e.delta.content.text for e in frames if e.type == "event_delta") == text_of(messages[0])
    after = cluster.metrics(y)
    ran = [grew(before[y.name], after, s) for s in (CLAIMED, COMPLETED, RECLAIMED)]
    assert ran == [1, 1, 1], f"{y.name} took the turn over once the lease lapsed (claimed, completed, reclaimed): {ran}"
