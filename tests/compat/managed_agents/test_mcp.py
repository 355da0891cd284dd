"""MCP tools for native agents (issue 30, docs/adr/0025): an agent's `mcp_servers` selected by
`mcp_toolset` entries, called by the gateway with the credential of the session's vaults, through
the official SDK, every frame validated with its strict models.

The MCP server is a real peer: the Python `mcp` SDK's `MCPServer` (mcp 2.x) over Streamable HTTP
(`gateway/mcp/tests/peers/bearer_server.py`, installed by `gateway/mcp/tests/peers/install`),
which answers 401 unless it gets its bearer token, and logs every call it receives. It listens
on loopback, so the gateway under test allows private servers (`GATEWAY_MCP__ALLOW_PRIVATE_SERVERS`).

The fake model calls an MCP tool with `tool:<name> <json>` (`<name>` the MCP tool's own name).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import parse_qs

import anthropic
import pytest

from conftest import ROOT, MODEL, Recorder, Watch, create_env, free_port, new_client, spawn_gateway, user_message
from helpers import validate as validate_model

TOKEN = "mcp-SECRET-token-7f3a"
INSTALL = "gateway/mcp/tests/peers/install"


class McpServer:
    """bearer_server.py on a free loopback port, with its call log."""

    def __init__(self, token: str) -> None:
        python = ROOT / ".cache/venv-mcp/bin/python"
        assert python.exists(), f"the Python MCP SDK is not installed at {python}; run {INSTALL}"
        self.port = free_port()
        self.log = Path(tempfile.mkstemp(prefix="mcp-calls.")[1])
        env = dict(os.environ, MCP_TEST_TOKEN=token, MCP_CALL_LOG=str(self.log))
        self.proc = subprocess.Popen([str(python), str(ROOT / "gateway/mcp/tests/peers/bearer_server.py"),
                                      str(self.port)], env=env, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert self.proc.poll() is None, f"bearer_server.py exited with {self.proc.returncode}"
                assert time.monotonic() < deadline, "bearer_server.py did not listen within 30s"
                time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def calls(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.log.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def server() -> Iterator[McpServer]:
    s = McpServer(TOKEN)
    yield s
    s.close()


@pytest.fixture(scope="module")
def gateway() -> Iterator[Any]:
    with spawn_gateway("mcp", api_key=False, GATEWAY_MCP__ALLOW_PRIVATE_SERVERS="true") as gw:
        yield gw


@pytest.fixture
def c(gateway: Any) -> Iterator[anthropic.Anthropic]:
    client = new_client(Recorder(), base_url=gateway.url)
    yield client
    client.close()


def vault_with(c: anthropic.Anthropic, url: str, token: str) -> str:
    vault = c.beta.vaults.create(display_name="mcp")
    c.beta.vaults.credentials.create(vault.id, auth={"type": "static_bearer", "token": token, "mcp_server_url": url})
    return vault.id


def mcp_agent(c: anthropic.Anthropic, url: str, policy: str | None = None) -> Any:
    toolset: dict[str, Any] = {"type": "mcp_toolset", "mcp_server_name": "calc"}
    if policy:
        toolset["default_config"] = {"permission_policy": {"type": policy}}
    return c.beta.agents.create(name="mcp-agent", model=MODEL, tools=[toolset],
                                mcp_servers=[{"type": "url", "name": "calc", "url": url}])


def session(c: anthropic.Anthropic, agent: Any, vault_ids: list[str]) -> Any:
    return c.beta.sessions.create(agent=agent.id, environment_id=create_env(c).id, vault_ids=vault_ids)


def text_of(content: list[Any]) -> str:
    return "".join(getattr(b, "text", "") for b in content)


def test_a_vault_token_reaches_the_server_and_the_result_the_model(c: anthropic.Anthropic, server: McpServer,
                                                                     gateway: Any) -> None:
    before = len(server.calls())
    s = session(c, mcp_agent(c, server.url, "always_allow"), [vault_with(c, server.url, TOKEN)])
    with Watch(c, s.id) as w:
        w.send(user_message('tool:add {"a": 2, "b": 40}'))
        w.until(lambda e: e.type == "session.status_idle" and e.stop_reason.type == "end_turn")
    [use] = w.of_type("agent.mcp_tool_use")
    assert (use.name, use.mcp_server_name, use.input) == ("add", "calc", {"a": 2, "b": 40})
    assert use.evaluated_permission == "allow"
    [result] = w.of_type("agent.mcp_tool_result")
    assert result.mcp_tool_use_id == use.id and not result.is_error
    assert text_of(result.content) == "42"
    assert text_of(w.of_type("agent.message")[-1].content) == "done: 42"
    assert not w.of_type("session.error")
    assert server.calls()[before:] == [{"tool": "add", "arguments": {"a": 2, "b": 40}}], "sent once"

    # The token is in no event, no answer, no log line and no database file.
    events = c.beta.sessions.events.list(s.id)
    assert TOKEN not in json.dumps([e.model_dump(mode="json") for e in events])
    assert TOKEN not in json.dumps(c.beta.sessions.retrieve(s.id).model_dump(mode="json"))
    for p in Path(gateway.workdir).rglob("*"):
        if p.is_file():
            assert TOKEN.encode() not in p.read_bytes(), f"the token is in {p}"


def test_always_ask_parks_the_call_and_a_denial_never_reaches_the_server(c: anthropic.Anthropic,
                                                                         server: McpServer) -> None:
    # An MCP toolset defaults to always_ask.
    s = session(c, mcp_agent(c, server.url), [vault_with(c, server.url, TOKEN)])
    before = len(server.calls())
    with Watch(c, s.id) as w:
        w.send(user_message('tool:echo {"text": "approved"}'))
        w.until(lambda e: e.type == "session.status_idle")
        [use] = w.of_type("agent.mcp_tool_use")
        assert use.evaluated_permission == "ask"
        assert w.events[-1].stop_reason.type == "requires_action"
        assert w.events[-1].stop_reason.event_ids == [use.id]
        assert server.calls()[before:] == [], "parked, not sent"
        w.send({"type": "user.tool_confirmation", "tool_use_id": use.id, "result": "allow"})
        w.until(lambda e: e.type == "session.status_idle" and e.stop_reason.type == "end_turn")
    [result] = w.of_type("agent.mcp_tool_result")
    assert text_of(result.content) == "approved" and not result.is_error
    assert server.calls()[before:] == [{"tool": "echo", "arguments": {"text": "approved"}}]

    with Watch(c, s.id) as w:
        w.send(user_message('tool:echo {"text": "refused"}'))
        w.until(lambda e: e.type == "session.status_idle")
        [use] = w.of_type("agent.mcp_tool_use")
        w.send({"type": "user.tool_confirmation", "tool_use_id": use.id, "result": "deny", "deny_message": "no"})
        w.until(lambda e: e.type == "session.status_idle" and e.stop_reason.type == "end_turn")
    [result] = w.of_type("agent.mcp_tool_result")
    assert result.is_error and "denied" in text_of(result.content)
    assert [x["arguments"] for x in server.calls()[before:]] == [{"text": "approved"}], "the denied call never arrived"


def test_a_tool_the_server_adds_mid_turn_is_offered_in_the_same_turn(c: anthropic.Anthropic,
                                                                     server: McpServer) -> None:
    # `grow` registers a tool and announces notifications/tools/list_changed; the model then
    # calls the new tool in the same turn (the fake model's `then` chain). Without the relisting
    # the gateway would not know the name and answer an error result.
    sprout = f"sprout_{free_port()}"
    s = session(c, mcp_agent(c, server.url, "always_allow"), [vault_with(c, server.url, TOKEN)])
    before = len(server.calls())
    with Watch(c, s.id) as w:
        w.send(user_message(f'tool:grow {{"name": "{sprout}"}}\nthen tool:{sprout} {{}}'))
        w.until(lambda e: e.type == "session.status_idle" and e.stop_reason.type == "end_turn")
    uses = w.of_type("agent.mcp_tool_use")
    assert [(u.name, u.mcp_server_name) for u in uses] == [("grow", "calc"), (sprout, "calc")]
    results = w.of_type("agent.mcp_tool_result")
    assert [(text_of(r.content), r.is_error) for r in results] == [("grown", False), (sprout, False)]
    assert text_of(w.of_type("agent.message")[-1].content) == f"done: {sprout}"
    assert [x["tool"] for x in server.calls()[before:]] == ["grow", sprout], "each sent once"


def test_a_refused_or_unreachable_server_is_reported_and_the_turn_goes_on(c: anthropic.Anthropic,
                                                                          server: McpServer) -> None:
    before = len(server.calls())
    s = session(c, mcp_agent(c, server.url, "always_allow"), [vault_with(c, server.url, "wrong-token")])
    with Watch(c, s.id) as w:
        w.send(user_message("hello"))
        w.until(lambda e: e.type == "session.status_idle" and e.stop_reason.type == "end_turn")
    [error] = w.of_type("session.error")
    assert error.error.type == "mcp_authentication_failed_error"
    assert error.error.mcp_server_name == "calc"
    assert text_of(w.of_type("agent.message")[-1].content) == "echo: hello", "the turn went on"
    assert server.calls()[before:] == []

    closed = f"http://127.0.0.1:{free_port()}/mcp"
    s = session(c, mcp_agent(c, closed, "always_allow"), [])
    with Watch(c, s.id) as w:
        w.send(user_message('tool:add {"a": 1, "b": 1}'))
        w.until(lambda e: e.type == "session.status_idle" and e.stop_reason.type == "end_turn")
    [error] = w.of_type("session.error")
    assert error.error.type == "mcp_connection_failed_error" and error.error.mcp_server_name == "calc"
    [result] = w.of_type("agent.tool_result")
    assert result.is_error, "a tool of an unavailable server is not called"


def test_private_servers_are_refused_by_default(server: McpServer) -> None:
    with spawn_gateway("mcp-public-only", api_key=False) as gw:
        c = new_client(Recorder(), base_url=gw.url)
        s = session(c, mcp_agent(c, server.url, "always_allow"), [vault_with(c, server.url, TOKEN)])
        with Watch(c, s.id) as w:
            w.send(user_message("hello"))
            w.until(lambda e: e.type == "session.status_idle" and e.stop_reason.type == "end_turn")
        [error] = w.of_type("session.error")
        assert error.error.type == "mcp_connection_failed_error"
        assert "allow_private_servers" in error.error.message
        c.close()


class TokenEndpoint(BaseHTTPRequestHandler):
    """An OAuth token endpoint: `grant_type=refresh_token` with the known refresh token and the
    client's Basic credentials gets the MCP server's token, and a rotated refresh token."""

    seen: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        form = parse_qs(self.rfile.read(int(self.headers["content-length"])).decode())
        TokenEndpoint.seen.append({"form": form, "authorization": self.headers.get("authorization")})
        basic = "Basic " + base64.b64encode(b"cid:client-SECRET").decode()
        if form.get("refresh_token") == ["rt-SECRET-1"] and self.headers.get("authorization") == basic:
            body = json.dumps({"access_token": TOKEN, "token_type": "Bearer", "expires_in": 3600,
                               "refresh_token": "rt-SECRET-2"}).encode()
            self.send_response(200)
        else:
            body = b'{"error": "invalid_grant"}'
            self.send_response(400)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_an_expiring_oauth_token_is_refreshed_before_the_server_is_called(c: anthropic.Anthropic,
                                                                         server: McpServer) -> None:
    endpoint = ThreadingHTTPServer(("127.0.0.1", 0), TokenEndpoint)
    threading.Thread(target=endpoint.serve_forever, daemon=True).start()
    try:
        vault = c.beta.vaults.create(display_name="oauth")
        soon = (datetime.now(timezone.utc) + timedelta(seconds=20)).isoformat()
        c.beta.vaults.credentials.create(vault.id, auth={
            "type": "mcp_oauth", "access_token": "at-SECRET-expiring", "mcp_server_url": server.url, "expires_at": soon,
            "refresh": {"client_id": "cid", "refresh_token": "rt-SECRET-1",
                        "token_endpoint": f"http://127.0.0.1:{endpoint.server_address[1]}/token",
                        "token_endpoint_auth": {"type": "client_secret_basic", "client_secret": "client-SECRET"}}})
        before = len(server.calls())
        s = session(c, mcp_agent(c, server.url, "always_allow"), [vault.id])
        with Watch(c, s.id) as w:
            w.send(user_message('tool:add {"a": 1, "b": 2}'))
            w.until(lambda e: e.type == "session.status_idle" and e.stop_reason.type == "end_turn")
        assert not w.of_type("session.error"), [e.error for e in w.of_type("session.error")]
        assert text_of(w.of_type("agent.mcp_tool_result")[0].content) == "3"
        assert server.calls()[before:] == [{"tool": "add", "arguments": {"a": 1, "b": 2}}]
        [refresh] = TokenEndpoint.seen
        assert refresh["form"]["grant_type"] == ["refresh_token"]
        [cred] = list(c.beta.vaults.credentials.list(vault.id))
        assert cred.auth.expires_at is not None and cred.auth.expires_at > datetime.now(timezone.utc) + timedelta(minutes=30)
    finally:
        endpoint.shutdown()


def test_a_credential_is_validated_against_its_server(c: anthropic.Anthropic, server: McpServer) -> None:
    """`credentials.mcp_oauth_validate`: the server is asked with the stored token; a refused
    OAuth token is refreshed once and asked again."""
    from anthropic.types.beta.vaults import BetaManagedAgentsCredentialValidation

    def validate(vault_id: str, credential_id: str) -> dict:
        r = c.beta.vaults.credentials.with_raw_response.mcp_oauth_validate(credential_id, vault_id=vault_id)
        assert r.status_code == 200, r.text()
        body = r.json()
        validate_model(BetaManagedAgentsCredentialValidation, body)
        assert TOKEN not in r.text()
        return body

    vault = c.beta.vaults.create(display_name="checked")
    good = c.beta.vaults.credentials.create(vault.id, auth={"type": "static_bearer", "token": TOKEN,
                                                            "mcp_server_url": server.url})
    v = validate(vault.id, good.id)
    assert (v["status"], v["mcp_probe"], v["refresh"]) == ("valid", None, None), v

    other = c.beta.vaults.create(display_name="wrong")
    bad = c.beta.vaults.credentials.create(other.id, auth={"type": "static_bearer", "token": "wrong-token",
                                                           "mcp_server_url": server.url})
    v = validate(other.id, bad.id)
    assert v["status"] == "invalid" and v["mcp_probe"]["http_response"]["status_code"] == 401, v

    endpoint = ThreadingHTTPServer(("127.0.0.1", 0), TokenEndpoint)
    threading.Thread(target=endpoint.serve_forever, daemon=True).start()
    try:
        third = c.beta.vaults.create(display_name="oauth")
        later = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
        oauth = c.beta.vaults.credentials.create(third.id, auth={
            "type": "mcp_oauth", "access_token": "at-SECRET-revoked", "mcp_server_url": server.url, "expires_at": later,
            "refresh": {"client_id": "cid", "refresh_token": "rt-SECRET-1",
                        "token_endpoint": f"http://127.0.0.1:{endpoint.server_address[1]}/token",
                        "token_endpoint_auth": {"type": "client_secret_basic", "client_secret": "client-SECRET"}}})
        v = validate(third.id, oauth.id)
        assert (v["status"], v["has_refresh_token"], v["refresh"]["status"]) == ("valid", True, "succeeded"), v
    finally:
        endpoint.shutdown()
