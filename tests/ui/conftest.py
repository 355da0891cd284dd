"""Fixtures of the viewer's browser test (tests/ui/run sets GATEWAY_BIN and UI_ARTIFACTS).

- `spawn_gateway(key=...)`: `gateway serve` on a free 127.0.0.1 port in a fresh directory, on its
  embedded defaults (SQLite, the fake model, the local sandbox); with `key`, an API key is made
  first with `gateway keys create`, so the gateway requires one. Stopped with SIGTERM afterwards.
- `Gateway.api(...)`: the Managed Agents API over plain urllib, to make what the page should show.
- `browser`: Debian's headless Chromium through Debian's chromedriver, a fresh profile per test
  (so sessionStorage starts empty), with the browser console recorded.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

MODEL = "claude-opus-4-7"


def artifacts() -> Path:
    path = Path(os.environ.get("UI_ARTIFACTS") or tempfile.gettempdir())
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gateway:
    """One `gateway serve` process in its own directory (restartable on the same port)."""

    def __init__(self, binary: str, env: dict[str, str], workdir: str, port: int, key: str | None) -> None:
        self.binary, self.env, self.workdir, self.key = binary, env, workdir, key
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = os.path.join(workdir, "gateway.log")
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([self.binary, "serve"], cwd=self.workdir, env=self.env,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            assert self.proc.poll() is None, f"the gateway exited with {self.proc.returncode}:\n{self.log_tail()}"
            try:
                if self.request("GET", "/readyz", key=False)[0] == 200:
                    return
            except OSError:
                pass
            assert time.monotonic() < deadline, f"the gateway was not ready in 30 s:\n{self.log_tail()}"
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read()[-4000:].decode("utf-8", "replace")

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
                key: bool = True) -> tuple[int, dict[str, str], bytes]:
        """One request; (status, headers, body) whatever the status. Redirects are not followed."""
        h = {"content-type": "application/json", **(headers or {})}
        if key and self.key:
            h["x-api-key"] = self.key
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=h)
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(req, timeout=10) as r:
                return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
        except urllib.error.HTTPError as e:
            return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()

    def api(self, method: str, path: str, body: Any = None) -> dict:
        status, _, raw = self.request(method, path, body)
        assert status == 200, f"{method} {path} answered {status}: {raw[:500]!r}"
        return json.loads(raw)

    def agent_and_environment(self, **toolset: Any) -> tuple[str, str]:
        agent = self.api("POST", "/v1/agents", {"name": "viewer-agent", "model": MODEL,
                                                "tools": [{"type": "agent_toolset_20260401", **toolset}]})
        env = self.api("POST", "/v1/environments", {"name": "viewer-env", "config": {
            "type": "cloud", "networking": {"type": "unrestricted"}}})
        return agent["id"], env["id"]

    def say(self, session_id: str, text: str) -> None:
        self.send(session_id, {"type": "user.message", "content": [{"type": "text", "text": text}]})

    def send(self, session_id: str, event: dict) -> None:
        self.api("POST", f"/v1/sessions/{session_id}/events", {"events": [event]})

    def events(self, session_id: str) -> list[dict]:
        return self.api("GET", f"/v1/sessions/{session_id}/events?limit=1000")["data"]

    def wait_idle(self, session_id: str, turns: int = 1) -> None:
        """Until the session has ended `turns` turns."""
        deadline = time.monotonic() + 20
        while sum(e["type"] == "session.status_idle" for e in self.events(session_id)) < turns:
            assert time.monotonic() < deadline, f"the turn did not end:\n{self.log_tail()}"
            time.sleep(0.1)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def gateway_bin() -> str:
    path = os.environ.get("GATEWAY_BIN", "")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no gateway binary at {path!r} (run tests/ui/run)", pytrace=False)
    return os.path.abspath(path)


@pytest.fixture
def spawn_gateway() -> Iterator[Callable[..., Gateway]]:
    started: list[Gateway] = []

    def spawn(key: bool = False) -> Gateway:
        binary = gateway_bin()
        workdir = tempfile.mkdtemp(prefix="gateway-ui.")
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        env.update(GATEWAY_LISTEN=f"127.0.0.1:{port}", GATEWAY_LOG__FORMAT="json")
        secret = None
        if key:
            made = subprocess.run([binary, "keys", "create"], cwd=workdir, env=env, capture_output=True, text=True,
                                  timeout=60)
            assert made.returncode == 0, f"gateway keys create failed: {made.stderr[-2000:]}"
            secret = made.stdout.strip()
            assert secret.startswith("gwk_"), f"keys create printed {made.stdout!r}"
        gw = Gateway(binary, env, workdir, port, secret)
        started.append(gw)
        gw.start()
        return gw

    yield spawn
    for gw in started:
        gw.stop()
        shutil.rmtree(gw.workdir, ignore_errors=True)


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    # --no-sandbox: Chromium's own sandbox needs user namespaces that containers and CI runners
    # often refuse; the browser only ever opens the gateway's own page here.
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,900",
                "--no-first-run", "--disable-extensions", "--disable-background-networking"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
