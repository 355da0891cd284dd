"""Webhook handler + launcher for self-hosted sessions (see README.md).

    GATEWAY_URL=... GATEWAY_API_KEY=... ENVIRONMENT_ID=... ENVIRONMENT_KEY=... \\
    WEBHOOK_SECRET=whsec_... LISTEN=127.0.0.1:8787 WORKDIR_ROOT=./sessions python handler.py

The gateway POSTs webhooks to /webhooks. Each one is verified with
`client.beta.webhooks.unwrap(body, headers=..., key=WEBHOOK_SECRET)` (401 if that fails), put on an
in-process queue, and only then answered 200 (503 if the queue is full, so the gateway retries).
Consumer threads take the events off the queue:

- `agent.session.action_required` with `required_action.type == "environment_connection"` for
  ENVIRONMENT_ID: re-read the session with the API key (`GET /v1/sessions/{id}`); ignore it if the
  session is gone (404) or terminated, or if its `environment.status` says the request is already
  resolved (`connected`) or abandoned (`failed`); otherwise start one executor (executor.py, the
  SDK's worker) for the session, unless one is already running. An executor whose process has
  exited is started again on the next request ("reconnect").
- `agent.session.failed`, `session.status_terminated`, `session.deleted`: release the session's
  compute (SIGTERM, then SIGKILL, to the executor's process group).

Exactly one executor per session: deliveries are deduplicated by `webhook-id` (a retried delivery
is answered 200 and dropped), and the start decision for a session is taken under that session's
lock against the map of running executors, so concurrent or repeated deliveries with different
ids start nothing more either.

GET /state answers JSON (no secrets) for operators and tests:
    {"environment_id", "queue_depth",
     "counters": {"refused", "received", "duplicate", "queued", "started", "released", "ignored",
                  "errors"},
     "executors": {"<session id>": {"pid", "running", "exit_code", "starts", "started_by": [webhook
                   ids], "workdir"}}}
GET /healthz answers 200 "ok". Logs go to stderr; no secret is ever logged or put in an argv (the
executor gets the environment key in its environment, and removes it from there).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
from standardwebhooks import Webhook

log = logging.getLogger("self_hosted.handler")

EXECUTOR = Path(__file__).resolve().with_name("executor.py")
MAX_BODY = 1 << 20  # bytes of one delivery
QUEUE_SIZE = 1000  # undone events; beyond that deliveries get 503 and the gateway retries them
SEEN_IDS = 10_000  # webhook ids remembered for deduplication
CONSUMERS = 4  # threads taking events off the queue
KILL_GRACE = 5.0  # seconds between SIGTERM and SIGKILL
FETCH_ATTEMPTS = 3  # tries at a session read that fails transiently
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")  # the session id also names its workdir
CONFIG_VARS = ("GATEWAY_URL", "GATEWAY_API_KEY", "ENVIRONMENT_ID", "ENVIRONMENT_KEY", "WEBHOOK_SECRET", "LISTEN",
               "WORKDIR_ROOT")
RELEASE_ON = ("agent.session.failed", "session.status_terminated", "session.deleted")


class ConfigError(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class Config:
    gateway_url: str
    api_key: str
    environment_id: str
    environment_key: str
    webhook_secret: str
    host: str
    port: int
    workdir_root: Path

    @classmethod
    def from_env(cls, env: Any = os.environ) -> "Config":
        def need(name: str) -> str:
            value = env.get(name, "").strip()
            if not value:
                raise ConfigError(f"{name} is not set")
            return value

        secret = need("WEBHOOK_SECRET")
        if not secret.startswith("whsec_"):
            raise ConfigError("WEBHOOK_SECRET must be the whsec_... secret the webhook registration returned")
        try:
            Webhook(secret)
        except Exception as e:
            raise ConfigError(f"WEBHOOK_SECRET is not a valid signing secret ({type(e).__name__})") from None
        listen = env.get("LISTEN", "").strip() or "127.0.0.1:8787"
        host, sep, port = listen.rpartition(":")
        if not sep or not port.isdigit():
            raise ConfigError(f"LISTEN must be host:port, got {listen!r}")
        return cls(
            gateway_url=need("GATEWAY_URL").rstrip("/"),
            api_key=need("GATEWAY_API_KEY"),
            environment_id=need("ENVIRONMENT_ID"),
            environment_key=need("ENVIRONMENT_KEY"),
            webhook_secret=secret,
            host=host.strip("[]") or "127.0.0.1",
            port=int(port),
            workdir_root=Path(env.get("WORKDIR_ROOT", "").strip() or "./sessions").resolve(),
        )


@dataclasses.dataclass
class Delivery:
    webhook_id: str
    event: Any  # anthropic.types.beta.BetaWebhookEvent
    attempt: int = 1


class Counters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(("refused", "received", "duplicate", "queued", "started", "released", "ignored",
                                      "errors"), 0)

    def add(self, name: str) -> None:
        with self._lock:
            self._values[name] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)


# --- executors -----------------------------------------------------------------------------------


@dataclasses.dataclass
class Executor:
    session_id: str
    workdir: Path
    proc: subprocess.Popen | None = None
    starts: int = 0
    started_by: list[str] = dataclasses.field(default_factory=list)
    reported_exit: bool = False

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def describe(self) -> dict[str, Any]:
        code = None if self.proc is None else self.proc.poll()
        return {"pid": None if self.proc is None else self.proc.pid, "running": self.running, "exit_code": code,
                "starts": self.starts, "started_by": list(self.started_by), "workdir": str(self.workdir)}


class Executors:
    """The executors this handler runs, one per session, each in a process group of its own."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._lock = threading.Lock()  # guards the two maps below
        self._by_session: dict[str, Executor] = {}
        self._session_locks: dict[str, threading.Lock] = {}

    def session_lock(self, session_id: str) -> threading.Lock:
        """Held while deciding to start or release a session's executor."""
        with self._lock:
            return self._session_locks.setdefault(session_id, threading.Lock())

    def running(self, session_id: str) -> Executor | None:
        with self._lock:
            ex = self._by_session.get(session_id)
        return ex if ex is not None and ex.running else None

    def start(self, session_id: str, webhook_id: str) -> Executor:
        """Starts the session's executor (call with its session lock held, after `running`)."""
        with self._lock:
            ex = self._by_session.setdefault(session_id, Executor(session_id, self.config.workdir_root / session_id))
        ex.workdir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_") and k not in CONFIG_VARS}
        env.update(ANTHROPIC_ENVIRONMENT_KEY=self.config.environment_key, PYTHONUNBUFFERED="1")
        argv = [sys.executable, str(EXECUTOR), self.config.gateway_url, self.config.environment_id, str(ex.workdir),
                session_id]
        ex.proc = subprocess.Popen(argv, env=env, cwd=ex.workdir, stdin=subprocess.DEVNULL, start_new_session=True)
        ex.starts += 1
        ex.started_by.append(webhook_id)
        ex.reported_exit = False
        return ex

    def release(self, session_id: str) -> Executor | None:
        """Stops the session's executor if it runs (call with its session lock held)."""
        ex = self.running(session_id)
        if ex is not None:
            stop(ex)
        return ex

    def reap(self) -> None:
        """Logs (once) each executor that exited on its own."""
        with self._lock:
            done = [ex for ex in self._by_session.values() if ex.proc is not None and not ex.running
                    and not ex.reported_exit]
        for ex in done:
            ex.reported_exit = True
            log.warning("executor for %s (pid %d) exited with %s", ex.session_id, ex.proc.pid, ex.proc.returncode)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {sid: ex.describe() for sid, ex in self._by_session.items()}

    def close(self) -> None:
        with self._lock:
            alive = [ex for ex in self._by_session.values() if ex.running]
        for ex in alive:
            log.info("stopping the executor for %s (pid %d): shutting down", ex.session_id, ex.proc.pid)
            stop(ex)


def stop(ex: Executor) -> None:
    """SIGTERM to the executor's process group (the worker and the bash it runs), SIGKILL after
    KILL_GRACE seconds."""
    assert ex.proc is not None
    for sig, wait in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, KILL_GRACE)):
        try:
            os.killpg(ex.proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            ex.proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    ex.reported_exit = True


# --- the launcher ----------------------------------------------------------------------------------


class Transient(Exception):
    """A session read failed in a way worth another try."""


class Launcher:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.client = anthropic.Anthropic(api_key=config.api_key, base_url=config.gateway_url, max_retries=2,
                                          timeout=15.0)
        self.queue: queue.Queue[Delivery] = queue.Queue(maxsize=QUEUE_SIZE)
        self.executors = Executors(config)
        self.counters = Counters()
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._seen_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- receiving (HTTP threads) --

    def verify(self, body: bytes, headers: dict[str, str]) -> Any:
        """The verified event; raises on a bad signature (or a signed body that is no event)."""
        return self.client.beta.webhooks.unwrap(body.decode("utf-8"), headers=headers, key=self.config.webhook_secret)

    def accept(self, webhook_id: str, event: Any) -> str:
        """Queues a verified delivery once per webhook id: "queued", "duplicate" or "full"."""
        self.counters.add("received")
        with self._seen_lock:
            if webhook_id in self._seen:
                self.counters.add("duplicate")
                return "duplicate"
            try:
                self.queue.put_nowait(Delivery(webhook_id, event))
            except queue.Full:
                return "full"
            self._seen[webhook_id] = None
            while len(self._seen) > SEEN_IDS:
                self._seen.popitem(last=False)
        self.counters.add("queued")
        return "queued"

    # -- handling (consumer threads) --

    def start(self) -> None:
        for i in range(CONSUMERS):
            self._threads.append(threading.Thread(target=self._consume, name=f"consumer-{i}", daemon=True))
        self._threads.append(threading.Thread(target=self._reap, name="reaper", daemon=True))
        for t in self._threads:
            t.start()

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=KILL_GRACE)
        self.executors.close()
        self.client.close()

    def _reap(self) -> None:
        while not self._stop.wait(2.0):
            self.executors.reap()

    def _consume(self) -> None:
        while not self._stop.is_set():
            try:
                item = self.queue.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                self.handle(item)
            except Transient as e:
                if item.attempt < FETCH_ATTEMPTS and not self._stop.is_set():
                    delay = 2.0 ** item.attempt
                    log.warning("%s: %s; trying again in %.0fs", item.webhook_id, e, delay)
                    item.attempt += 1
                    threading.Timer(delay, self._requeue, args=(item,)).start()
                else:
                    self.counters.add("errors")
                    log.error("%s: %s; giving up", item.webhook_id, e)
            except Exception:
                self.counters.add("errors")
                log.exception("%s: handling failed", item.webhook_id)
            finally:
                self.queue.task_done()

    def _requeue(self, item: Delivery) -> None:
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            self.counters.add("errors")
            log.error("%s: the queue is full; dropped", item.webhook_id)

    def handle(self, item: Delivery) -> None:
        data = item.event.data
        kind, session_id = getattr(data, "type", None), getattr(data, "id", None)
        if not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
            return self.ignore(item, f"{kind}: no usable session id")
        if kind == "agent.session.action_required":
            self.on_action_required(item, session_id, getattr(data, "required_action", None))
        elif kind in RELEASE_ON:
            self.on_session_over(item, kind, session_id)
        else:
            self.ignore(item, f"{kind} for {session_id}: nothing to do")

    def ignore(self, item: Delivery, why: str) -> None:
        self.counters.add("ignored")
        log.info("%s: ignored: %s", item.webhook_id, why)

    def on_action_required(self, item: Delivery, session_id: str, action: Any) -> None:
        action = action if isinstance(action, dict) else {}
        if action.get("type") != "environment_connection":
            return self.ignore(item, f"{session_id}: required action {action.get('type')!r} is not ours")
        if action.get("environment_id") != self.config.environment_id:
            return self.ignore(item, f"{session_id}: a connection to {action.get('environment_id')!r}, "
                                     f"not to {self.config.environment_id}")
        with self.executors.session_lock(session_id):
            ex = self.executors.running(session_id)
            if ex is not None:
                return self.ignore(item, f"{session_id}: its executor already runs (pid {ex.proc.pid})")
            session = self.fetch_session(session_id)
            if session is None:
                return self.ignore(item, f"{session_id}: the session is deleted")
            if session.get("status") == "terminated" or session.get("archived_at"):
                return self.ignore(item, f"{session_id}: the session is {session.get('status')}"
                                         + (" (archived)" if session.get("archived_at") else ""))
            if session.get("environment_id") != self.config.environment_id:
                return self.ignore(item, f"{session_id}: the session runs in {session.get('environment_id')!r}")
            status = (session.get("environment") or {}).get("status")
            if status in ("connected", "failed"):
                return self.ignore(item, f"{session_id}: already resolved (environment.status {status})")
            ex = self.executors.start(session_id, item.webhook_id)
            self.counters.add("started")
            log.info("%s: started the executor for %s (pid %d, start %d, environment.status was %s, workdir %s)",
                     item.webhook_id, session_id, ex.proc.pid, ex.starts, status, ex.workdir)

    def on_session_over(self, item: Delivery, kind: str, session_id: str) -> None:
        with self.executors.session_lock(session_id):
            ex = self.executors.release(session_id)
        if ex is None:
            return self.ignore(item, f"{kind} for {session_id}: no executor runs for it")
        self.counters.add("released")
        detail = ""
        error = getattr(item.event.data, "error", None)
        if kind == "agent.session.failed" and isinstance(error, dict):
            detail = f" ({error.get('type')}: {error.get('message')})"
        log.info("%s: %s%s: released the executor for %s (pid %d, exit %s)", item.webhook_id, kind, detail,
                 session_id, ex.proc.pid, ex.proc.returncode)

    def fetch_session(self, session_id: str) -> dict | None:
        """`GET /v1/sessions/{id}` with the API key: its JSON, or None once it is gone."""
        try:
            r = self.client.beta.sessions.with_raw_response.retrieve(session_id)
        except anthropic.NotFoundError:
            return None
        except (anthropic.APIConnectionError, anthropic.RateLimitError, anthropic.InternalServerError) as e:
            raise Transient(f"reading {session_id}: {type(e).__name__}") from None
        body = r.json()
        if not isinstance(body, dict):
            raise Transient(f"reading {session_id}: not a JSON object")
        return body

    def state(self) -> dict[str, Any]:
        return {"environment_id": self.config.environment_id, "queue_depth": self.queue.qsize(),
                "counters": self.counters.snapshot(), "executors": self.executors.snapshot()}


# --- HTTP ------------------------------------------------------------------------------------------


def make_handler(launcher: Launcher) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "self-hosted-launcher"
        sys_version = ""

        def reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/state":
                self.reply(200, launcher.state())
            elif path == "/healthz":
                self.reply(200, {"status": "ok"})
            else:
                self.reply(404, {"error": "not found"})

        def do_POST(self) -> None:
            if self.path.split("?", 1)[0] != "/webhooks":
                return self.reply(404, {"error": "not found"})
            length = self.headers.get("content-length")
            if length is None or not length.isdigit():
                self.close_connection = True
                return self.reply(411, {"error": "content-length required"})
            if int(length) > MAX_BODY:
                self.close_connection = True
                return self.reply(413, {"error": "body too large"})
            body = self.rfile.read(int(length))
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                event = launcher.verify(body, headers)
            except json.JSONDecodeError:
                log.warning("refused a delivery: a signed body that is not JSON")
                return self.reply(400, {"error": "not JSON"})
            except Exception as e:  # WebhookVerificationError, a malformed header (ValueError), bad UTF-8
                launcher.counters.add("refused")
                log.warning("refused a delivery: signature verification failed (%s: %s)", type(e).__name__, e)
                return self.reply(401, {"error": "invalid signature"})
            webhook_id = headers["webhook-id"]
            if getattr(event, "type", None) != "event" or getattr(event, "data", None) is None:
                log.warning("%s: refused: the body is no webhook event", webhook_id)
                return self.reply(400, {"error": "not an event"})
            outcome = launcher.accept(webhook_id, event)
            if outcome == "full":
                log.error("%s: the queue is full; answered 503", webhook_id)
                return self.reply(503, {"error": "busy"})
            log.info("%s: %s %s for %s", webhook_id, outcome, getattr(event.data, "type", "?"),
                     getattr(event.data, "id", "?"))
            self.reply(200, {"status": outcome})

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s %s", self.address_string(), format % args)

    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "httpx2", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        config = Config.from_env()
    except ConfigError as e:
        log.error("configuration: %s", e)
        return 2
    launcher = Launcher(config)
    if ":" in config.host:
        Server.address_family = socket.AF_INET6
    server = Server((config.host, config.port), make_handler(launcher))
    launcher.start()

    def shut_down(signum: int, _frame: Any) -> None:
        log.info("signal %d: shutting down", signum)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, shut_down)
    signal.signal(signal.SIGINT, shut_down)
    host, port = server.server_address[:2]
    log.info("listening on http://%s:%d/webhooks for environment %s (gateway %s, workdirs under %s)",
             host, port, config.environment_id, config.gateway_url, config.workdir_root)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        launcher.close()
        log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
