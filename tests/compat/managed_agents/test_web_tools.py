"""`web_fetch` and `web_search` of `agent_toolset_20260401` (issue 30), called by the fake model
(`tool:web_fetch {"url": ...}`) and run by the gateway, seen through the official SDK.

`web_fetch` goes through the SSRF rule: a loopback page is refused by default (the error names
`web.allow_private_targets`) and served, HTML turned into text, when a gateway allows private
targets. `web_search` calls the Brave Search API shape; here a loopback stub speaking its wire
format (`GET /res/v1/web/search?q=&count=`, `X-Subscription-Token`, `{"web": {"results": [...]}}`).
Without a provider the tool answers an error naming the setting.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator
from urllib.parse import parse_qs, urlparse

import anthropic
import pytest

from conftest import MODEL, Recorder, Watch, create_env, new_client, spawn_gateway, user_message

PAGE = b"<html><head><title>t</title><script>var hidden = 1;</script></head>" \
       b"<body><h1>Gateway notes</h1><p>The answer is <b>42</b>.</p></body></html>"
KEY = "brave-SECRET-key-0c9d"


class Stub(BaseHTTPRequestHandler):
    """A page at /page, and Brave's web search at /res/v1/web/search."""

    searches: list[dict[str, Any]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urlparse(self.path)
        if url.path == "/page":
            self.reply(200, "text/html; charset=utf-8", PAGE)
        elif url.path == "/res/v1/web/search":
            Stub.searches.append({"query": parse_qs(url.query), "token": self.headers.get("X-Subscription-Token")})
            if self.headers.get("X-Subscription-Token") != KEY:
                self.reply(401, "application/json", b'{"type": "ErrorResponse"}')
                return
            body = {"type": "search", "query": {"original": parse_qs(url.query)["q"][0]},
                    "web": {"type": "search", "results": [
                        {"title": "Agent Client Protocol", "url": "https://agentclientprotocol.com/",
                         "description": "A protocol for <strong>editors</strong> and agents."},
                        {"title": "Model Context Protocol", "url": "https://modelcontextprotocol.io/",
                         "description": "Tools for models."}]}}
            self.reply(200, "application/json", json.dumps(body).encode())
        else:
            self.reply(404, "text/plain", b"no")

    def reply(self, status: int, ctype: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def stub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def tool_turn(c: anthropic.Anthropic, text: str) -> tuple[Any, Any]:
    """One turn of an agent whose web tools run without asking: the tool use and its result."""
    toolset = {"type": "agent_toolset_20260401", "default_config": {"permission_policy": {"type": "always_allow"}}}
    agent = c.beta.agents.create(name="web", model=MODEL, tools=[toolset])
    s = c.beta.sessions.create(agent=agent.id, environment_id=create_env(c).id)
    with Watch(c, s.id) as w:
        w.send(user_message(text))
        w.until(lambda e: e.type == "session.status_idle" and e.stop_reason.type == "end_turn")
    [use] = w.of_type("agent.tool_use")
    [result] = w.of_type("agent.tool_result")
    assert result.tool_use_id == use.id
    return use, result


def text_of(result: Any) -> str:
    return "".join(getattr(b, "text", "") for b in result.content)


def test_web_fetch_refuses_loopback_by_default_and_serves_it_when_allowed(stub: str) -> None:
    with spawn_gateway("web-default", api_key=False) as gw:
        c = new_client(Recorder(), base_url=gw.url)
        use, result = tool_turn(c, f'tool:web_fetch {{"url": "{stub}/page"}}')
        assert use.name == "web_fetch" and result.is_error
        assert "web.allow_private_targets" in text_of(result), text_of(result)
        c.close()
    with spawn_gateway("web-private", api_key=False, GATEWAY_WEB__ALLOW_PRIVATE_TARGETS="true") as gw:
        c = new_client(Recorder(), base_url=gw.url)
        _, result = tool_turn(c, f'tool:web_fetch {{"url": "{stub}/page"}}')
        text = text_of(result)
        assert not result.is_error, text
        assert "Gateway notes" in text and "The answer is" in text and "42" in text, text
        assert "<h1>" not in text and "var hidden" not in text, text
        c.close()


def test_web_search_calls_the_configured_provider_or_names_the_missing_setting(stub: str) -> None:
    with spawn_gateway("web-search", api_key=False, GATEWAY_WEB__SEARCH__PROVIDER="brave",
                       GATEWAY_WEB__SEARCH__BASE_URL=stub, BRAVE_SEARCH_API_KEY=KEY) as gw:
        c = new_client(Recorder(), base_url=gw.url)
        before = len(Stub.searches)
        _, result = tool_turn(c, 'tool:web_search {"query": "agent protocols", "count": 2}')
        text = text_of(result)
        assert not result.is_error, text
        assert "1. Agent Client Protocol" in text and "https://modelcontextprotocol.io/" in text, text
        assert "<strong>" not in text, text
        [sent] = Stub.searches[before:]
        assert sent["query"]["q"] == ["agent protocols"] and sent["query"]["count"] == ["2"] and sent["token"] == KEY
        log = open(gw.log_path, encoding="utf-8").read()
        assert KEY not in log, "the provider key never reaches the log"
        c.close()
    with spawn_gateway("web-no-provider", api_key=False) as gw:
        c = new_client(Recorder(), base_url=gw.url)
        _, result = tool_turn(c, 'tool:web_search {"query": "anything"}')
        assert result.is_error and "web.search.provider" in text_of(result), text_of(result)
        c.close()
