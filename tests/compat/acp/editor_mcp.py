"""An editor's MCP servers on a native agent (issue 30), driven by the Python ACP SDK
(agent-client-protocol==0.12.1) as Zed drives `gateway acp`: `session/new` carries one stdio
server and one http server, and the agent's tools include theirs.

Usage: editor_mcp.py GATEWAY_BIN CONFIG WORKDIR [NAMESPACE_CONFIG]

With NAMESPACE_CONFIG (a gateway on the `namespace` sandbox provider), a stdio server from the
Python SDK (`gateway/mcp/tests/peers/whoami_server.py`, run by the system's python3 with a copy of
the SDK's packages in the workspace, the only host directory the sandbox shows) reports where it runs: as the sandbox user
(uid 65534), in the workspace (`/workspace`), with the `env` the editor gave it.

The servers are real peers from the registries, installed by gateway/mcp/tests/peers/install:
`@modelcontextprotocol/server-everything` (stdio: run by the gateway inside the session's
sandbox, its `env` passed in the process environment) and the Python `mcp` SDK's `MCPServer` (mcp 2.x) over
Streamable HTTP (`gateway/mcp/tests/peers/bearer_server.py`, which refuses requests without its
bearer token and logs each call). The fake model calls a tool with `tool:<name> <json>`; an
editor's MCP tool always asks, so each call shows a permission request first. Both servers offer
an `echo` tool, so calls name their server (`tool:<server>/<name>`, the fake model's spelling of
a name two sources offer).
"""

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import acp
from acp import schema
from tap import check, run

GATEWAY, CONFIG, WORK = sys.argv[1], sys.argv[2], Path(sys.argv[3])
NAMESPACE_CONFIG = sys.argv[4] if len(sys.argv) > 4 else None
ROOT = Path(__file__).resolve().parents[3]
TOKEN = "editor-mcp-SECRET-51c2"
EVERYTHING = ROOT / ".cache/npm-mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
PYTHON_MCP = ROOT / ".cache/venv-mcp/bin/python"


class Editor:
    def __init__(self):
        self.updates = []
        self.permissions = []
        self.answer = "allow_once"

    def on_connect(self, conn):
        self.conn = conn

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append(update)

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.permissions.append(tool_call)
        chosen = next(o for o in options if o.kind == self.answer)
        return schema.RequestPermissionResponse(
            outcome=schema.AllowedOutcome(outcome="selected", option_id=chosen.option_id)
        )

    def results(self):
        """The text of every completed tool call, in order."""
        out = []
        for u in self.updates:
            if getattr(u, "session_update", None) == "tool_call_update" and u.status in ("completed", "failed"):
                texts = [getattr(getattr(c, "content", None), "text", "") for c in (u.content or [])]
                out.append((u.status, "".join(texts)))
        return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def text(t):
    return schema.TextContentBlock(type="text", text=t)


async def main():
    check(EVERYTHING.exists() and PYTHON_MCP.exists(), "the MCP peers are installed (gateway/mcp/tests/peers/install)")
    port = free_port()
    calls = Path(tempfile.mkstemp(prefix="editor-mcp-calls.")[1])
    server = subprocess.Popen(
        [str(PYTHON_MCP), str(ROOT / "gateway/mcp/tests/peers/bearer_server.py"), str(port)],
        env=dict(os.environ, MCP_TEST_TOKEN=TOKEN, MCP_CALL_LOG=str(calls)),
        stdin=subprocess.DEVNULL,
    )
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                await asyncio.sleep(0.1)
        ws = WORK / "ws-mcp"
        ws.mkdir(exist_ok=True)
        editor = Editor()
        async with acp.spawn_agent_process(editor, GATEWAY, "acp", "--config", CONFIG, cwd=str(WORK),
                                           env=dict(os.environ)) as (conn, proc):
            init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION,
                                         client_info=schema.Implementation(name="zed-shaped", version="1"))
            mcp_caps = init.agent_capabilities.mcp_capabilities
            check(mcp_caps.http and not mcp_caps.sse, "mcpCapabilities: http true, sse false")

            stdio = schema.McpServerStdio(name="everything", command="node", args=[str(EVERYTHING), "stdio"],
                                          env=[schema.EnvVariable(name="EVERYTHING_NOTE", value="from-the-editor")])
            http = schema.HttpMcpServer(type="http", name="calc", url=f"http://127.0.0.1:{port}/mcp",
                                        headers=[schema.HttpHeader(name="Authorization", value=f"Bearer {TOKEN}")])
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[stdio, http])).session_id
            check(sid.startswith("sesn_"), "session/new with a stdio and an http MCP server opens on a native agent")

            done = await conn.prompt(session_id=sid, prompt=[text('tool:everything/echo {"message": "hi from zed"}')])
            check(done.stop_reason == "end_turn", "the turn calling the stdio server's tool ends")
            check(len(editor.permissions) == 1, f"an editor MCP tool asks first: {editor.results()}")
            check(editor.results() == [("completed", "Echo: hi from zed")],
                  f"the stdio server's echo answered inside the sandbox: {editor.results()}")

            done = await conn.prompt(session_id=sid, prompt=[text('tool:calc/add {"a": 20, "b": 22}')])
            check(done.stop_reason == "end_turn", "the turn calling the http server's tool ends")
            check(editor.results()[-1] == ("completed", "42"), f"the http server's add answered: {editor.results()}")
            got = [json.loads(line) for line in calls.read_text().splitlines()]
            check(got == [{"tool": "add", "arguments": {"a": 20, "b": 22}}],
                  "the http server received the call once, with the editor's bearer token")

            editor.answer = "reject_once"
            done = await conn.prompt(session_id=sid, prompt=[text('tool:calc/add {"a": 1, "b": 1}')])
            check(editor.results()[-1][0] == "failed", "a rejected call fails")
            got = [json.loads(line) for line in calls.read_text().splitlines()]
            check(len(got) == 1, "a rejected call never reaches the server")

        stored = b"".join(p.read_bytes() for p in (WORK / "data").glob("gateway.db*"))
        check(len(stored) > 0 and TOKEN.encode() not in stored and b"from-the-editor" not in stored,
              "the editor's header and env values are sealed in the database")
        if NAMESPACE_CONFIG:
            await in_the_namespace_sandbox()
    finally:
        server.kill()
        server.wait()
        calls.unlink(missing_ok=True)


async def in_the_namespace_sandbox():
    ws = WORK / "ws-namespace"
    ws.mkdir(exist_ok=True)
    # The sandbox shows the system read-only and the workspace: the SDK's packages (built for the
    # venv's CPython 3.11, the system's too) go in the workspace, run by the system's python3.
    packages = next((PYTHON_MCP.parent.parent / "lib").glob("python3.*/site-packages"))
    shutil.copytree(packages, ws / "site-packages", dirs_exist_ok=True)
    shutil.copy(ROOT / "gateway/mcp/tests/peers/whoami_server.py", ws / "whoami_server.py")
    editor = Editor()
    async with acp.spawn_agent_process(editor, GATEWAY, "acp", "--config", NAMESPACE_CONFIG, cwd=str(WORK),
                                       env=dict(os.environ)) as (conn, proc):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION,
                              client_info=schema.Implementation(name="zed-shaped", version="1"))
        stdio = schema.McpServerStdio(name="whoami", command="/usr/bin/python3", args=["/workspace/whoami_server.py"],
                                      env=[schema.EnvVariable(name="PYTHONPATH", value="/workspace/site-packages"),
                                           schema.EnvVariable(name="WHOAMI_NOTE", value="given-by-the-editor")])
        sid = (await conn.new_session(cwd=str(ws), mcp_servers=[stdio])).session_id
        done = await conn.prompt(session_id=sid, prompt=[text("tool:whoami {}")])
        check(done.stop_reason == "end_turn", "the turn calling the sandboxed server ends")
        status, answer = editor.results()[-1]
        check(status == "completed", f"the sandboxed server answered: {answer}")
        seen = json.loads(answer)
        check(seen == {"uid": 65534, "cwd": "/workspace", "note": "given-by-the-editor"},
              f"the stdio server runs as the sandbox user, in the workspace, with the editor's env: {seen}")


run(main, 180)
