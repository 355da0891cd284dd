"""Raw frames on `gateway acp`'s stdio, and the experimental WebSocket endpoint of `gateway serve`.

Usage: editor_raw_and_ws.py GATEWAY_BIN CONFIG WORKDIR WS_URL

- stdio, raw: a malformed line is answered -32700 and the connection stays up; an unknown
  method -32601; every line on stdout is a JSON-RPC frame (logs go to stderr).
- WebSocket (`ws://.../acp`, Python SDK `acp.ws.create_websocket_stream`): initialize,
  session/new, a prompt streamed to end_turn, and session/load of that session on a second
  connection (sessions outlive connections). A network editor opens workspaces only under
  `[acp] workspace_roots` (WORKDIR/projects in the config run-acp writes): WORKDIR itself is
  refused with -32602 naming the setting.
"""

import asyncio
import json
import sys
from pathlib import Path

import acp
from acp import schema
from acp.ws import create_websocket_stream
from tap import check, run

GATEWAY, CONFIG, WORK, WS_URL = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]


async def raw_stdio():
    proc = await asyncio.create_subprocess_exec(
        GATEWAY, "acp", "--config", CONFIG, cwd=str(WORK),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )

    async def exchange(line):
        proc.stdin.write(line.encode() + b"\n")
        await proc.stdin.drain()
        out = await asyncio.wait_for(proc.stdout.readline(), 30)
        return json.loads(out)  # fails on anything but a JSON frame

    r = await exchange("this is { not json")
    check(r.get("error", {}).get("code") == -32700 and r.get("id") is None, "a malformed line is answered -32700")
    r = await exchange(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "no/such_method", "params": {}}))
    check(r.get("id") == 1 and r["error"]["code"] == -32601, "an unknown method is answered -32601")
    r = await exchange(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"protocolVersion": 1}}))
    check(r.get("id") == 2 and r["result"]["protocolVersion"] == 1, "the connection stayed up: initialize works after both")
    r = await exchange(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": {"sessionId": "sesn_unknown", "prompt": []}}))
    check(r["error"]["code"] == -32002, "a prompt for an unknown session is -32002")
    proc.stdin.close()
    code = await asyncio.wait_for(proc.wait(), 30)
    check(code == 0, f"gateway acp exits 0 when the editor closes stdin ({code})")


class Editor:
    def __init__(self):
        self.updates = []

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append(update)

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        return schema.RequestPermissionResponse(outcome=schema.DeniedOutcome(outcome="cancelled"))

    def text(self, kind):
        return "".join(u.content.text for u in self.updates if u.session_update == kind and hasattr(u.content, "text"))


async def websocket():
    ws = WORK / "projects" / "ws-websocket"
    ws.mkdir(parents=True, exist_ok=True)
    editor = Editor()
    conn = acp.connect_to_agent(editor, await create_websocket_stream(WS_URL))
    init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
    check(init.protocol_version == 1, "initialize over WebSocket")
    try:
        await conn.new_session(cwd=str(WORK), mcp_servers=[])
        refused = None
    except acp.RequestError as e:
        refused = e
    check(
        refused is not None and refused.code == -32602 and "workspace_roots" in str(refused),
        f"a cwd outside [acp] workspace_roots is refused over the network ({refused!r})",
    )
    sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
    r = await conn.prompt(session_id=sid, prompt=[schema.TextContentBlock(type="text", text="over the socket")])
    check(r.stop_reason == "end_turn" and editor.text("agent_message_chunk") == "echo: over the socket", "a prompt streams over WebSocket")
    await conn.close()

    again = Editor()
    conn = acp.connect_to_agent(again, await create_websocket_stream(WS_URL))
    await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
    await conn.load_session(cwd=str(ws), session_id=sid, mcp_servers=[])
    await asyncio.sleep(0.5)
    check(again.text("user_message_chunk") == "over the socket", "a second connection loads the session and its history")
    await conn.close()


async def main():
    await raw_stdio()
    await websocket()


if __name__ == "__main__":
    run(main, 120)
