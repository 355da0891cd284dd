"""Fixtures of the A2A compat suite: real gateway processes and real peers.

tests/compat/run-a2a sets GATEWAY_BIN (the built `gateway` binary) and PEER_V03_PYTHON (the
interpreter of the a2a-sdk 0.3.26 venv); this venv has a2a-sdk 1.3.0.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

HERE = Path(__file__).parent
ROOT = HERE.parents[2]


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_http(url: str, proc: subprocess.Popen, log: Path, secs: float = 30) -> None:
    deadline = time.time() + secs
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: process exited; log:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer; log:\n{log.read_text()[-3000:]}")


class Peer:
    def __init__(self, python: str, script: str, *args: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(tempfile.mkstemp(prefix="a2a-peer-", suffix=".log")[1])
        self.proc = subprocess.Popen(
            [python, str(HERE / script), str(self.port), *args],
            stdout=self.log.open("w"), stderr=subprocess.STDOUT,
        )
        wait_http(f"{self.url}/.well-known/agent-card.json", self.proc, self.log)

    def counts(self) -> dict:
        return httpx.get(f"{self.url}/count", timeout=5).json()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


class Gateway:
    """A `gateway serve` process on a config file; restartable on the same database."""

    def __init__(self, remotes: dict[str, str], mcp_url: str | None = None):
        self.dir = Path(tempfile.mkdtemp(prefix="a2a-gw-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        lines = [
            f'listen = "127.0.0.1:{self.port}"',
            f'public_url = "{self.url}"',
            f'database_url = "sqlite://{self.dir}/gateway.db"',
            f'data_dir = "{self.dir}/data"',
            "[workers]", "lease_secs = 3", "shutdown_grace_secs = 1", "poll_ms = 200",
            "[a2a]", "conformance_agent = true", "allow_private_push_targets = true",
            "[mcp]", "allow_private_servers = true",
            "[agents.echo]", 'backend = "native"', 'description = "the fake model: echoes"',
        ]
        if mcp_url:
            # An agent whose tools come from an MCP server (it listens on loopback).
            lines += ["[agents.tools]", 'backend = "native"', "[agents.tools.mcp_servers]", f'everything = "{mcp_url}"']
        for name, url in remotes.items():
            lines += [f"[agents.{name}]", f'backend = "a2a:{name}"', f"[remotes.a2a.{name}]", f'url = "{url}"',
                      'auth = "Bearer peer-secret"']
        (self.dir / "gateway.toml").write_text("\n".join(lines) + "\n")
        self.proc = None
        self.log = self.dir / "gateway.log"
        self.start()

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        env["GATEWAY_LOG__FORMAT"] = "json"
        self.proc = subprocess.Popen(
            [os.environ["GATEWAY_BIN"], "serve", "--config", str(self.dir / "gateway.toml")],
            cwd=self.dir, env=env, stdout=subprocess.DEVNULL, stderr=self.log.open("a"),
        )
        wait_http(f"{self.url}/readyz", self.proc, self.log)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)

    def log_text(self) -> str:
        return self.log.read_text()


@pytest.fixture(scope="session")
def peers():
    v03_python = os.environ.get("PEER_V03_PYTHON", sys.executable)
    ps = {
        "peer1": Peer(sys.executable, "peer_v1.py"),
        "peer1poll": Peer(sys.executable, "peer_v1.py", "--no-streaming"),
        "peer03": Peer(v03_python, "peer_v03.py"),
    }
    yield ps
    for p in ps.values():
        p.stop()


class McpServer:
    """`@modelcontextprotocol/server-everything` over Streamable HTTP (installed by
    gateway/mcp/tests/peers/install)."""

    def __init__(self):
        script = ROOT / ".cache/npm-mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
        assert script.exists(), "server-everything is missing: run gateway/mcp/tests/peers/install"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.log = Path(tempfile.mkstemp(prefix="a2a-mcp-", suffix=".log")[1])
        self.proc = subprocess.Popen(["node", str(script), "streamableHttp"], env=dict(os.environ, PORT=str(self.port)),
                                     stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"server-everything did not listen; log:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture(scope="session")
def mcp_server():
    s = McpServer()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def gw(peers, mcp_server):
    g = Gateway({name: p.url for name, p in peers.items()}, mcp_server.url)
    yield g
    g.stop()
    if os.environ.get("A2A_KEEP_LOGS"):
        print(g.log_text()[-5000:])
