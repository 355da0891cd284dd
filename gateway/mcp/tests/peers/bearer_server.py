"""A Streamable HTTP MCP server on the official Python SDK (`MCPServer`, FastMCP's successor in
mcp 2.x; mcp==2.3.0) for tests/http.rs and the gateway's compat tests.

    bearer_server.py PORT

Every request must carry `Authorization: Bearer $MCP_TEST_TOKEN`; otherwise the answer is 401,
with a `WWW-Authenticate: Bearer` challenge unless MCP_TEST_CHALLENGE=0 (some servers send none,
and the client must still recognise the refusal). Each tool call is appended as one JSON line to
the file $MCP_CALL_LOG before it runs, so a test can assert what reached the server. The `revoke`
tool makes the server refuse the token from then on (a credential revoked mid-session).
"""

import asyncio
import json
import os
import sys

import uvicorn
from mcp.server.mcpserver import Context, MCPServer

TOKEN = os.environ["MCP_TEST_TOKEN"]
CALL_LOG = os.environ["MCP_CALL_LOG"]
CHALLENGE = os.environ.get("MCP_TEST_CHALLENGE", "1") != "0"

mcp = MCPServer("bearer-test", log_level="WARNING")


def record(tool, arguments):
    with open(CALL_LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")


@mcp.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    record("add", {"a": a, "b": b})
    return a + b


@mcp.tool()
def echo(text: str) -> str:
    """Returns the text it was given."""
    record("echo", {"text": text})
    return text


@mcp.tool()
async def sleep(seconds: float) -> str:
    """Sleeps, then answers: the client's per-call timeout must fire first."""
    record("sleep", {"seconds": seconds})
    await asyncio.sleep(seconds)
    return "slept"


@mcp.tool()
def big(size: int) -> str:
    """Returns `size` bytes of text, to exceed the client's result bound."""
    record("big", {"size": size})
    return "x" * size


@mcp.tool()
async def grow(name: str, ctx: Context) -> str:
    """Registers a new tool called `name` and announces notifications/tools/list_changed."""
    record("grow", {"name": name})

    def added() -> str:
        record(name, {})
        return name

    mcp.add_tool(added, name=name, description="added at run time")
    await ctx.session.send_tool_list_changed()
    return "grown"


@mcp.tool()
def revoke() -> str:
    """Stops accepting the token: every later request is refused (a token revoked mid-session)."""
    global TOKEN
    record("revoke", {})
    TOKEN = TOKEN + "-revoked"
    return "revoked"


class RequireBearer:
    """ASGI middleware: 401 unless the request carries the expected bearer token."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization", b"").decode("latin-1") != f"Bearer {TOKEN}":
                response_headers = [(b"content-type", b"text/plain")]
                if CHALLENGE:
                    response_headers.append((b"www-authenticate", b'Bearer error="invalid_token"'))
                await send({"type": "http.response.start", "status": 401, "headers": response_headers})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await self.app(scope, receive, send)


if __name__ == "__main__":
    port = int(sys.argv[1])
    uvicorn.run(RequireBearer(mcp.streamable_http_app()), host="127.0.0.1", port=port, log_level="warning")
