"""claude-agent-acp (npm @agentclientprotocol/claude-agent-acp@0.101.0) as an `acp:` backend,
against the loopback Anthropic Messages API stub, driven through `gateway acp` by the Python
ACP SDK as the editor.

Usage: claude_python.py GATEWAY_BIN CONFIG WORKDIR

The stub answers with the fake model's script: `tool:Bash {...}` makes the "model" call Bash,
which claude-agent-acp (default permission mode) asks permission for. The editor approves; the
command runs in the session's workspace, the turn completes with end_turn.
"""

import asyncio
import sys
from pathlib import Path

import acp
from acp import schema
from tap import check, run

GATEWAY, CONFIG, WORK = sys.argv[1], sys.argv[2], Path(sys.argv[3])


class Editor:
    def __init__(self):
        self.updates = []
        self.permissions = []

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append(update)

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.permissions.append((tool_call, options))
        chosen = next(o for o in options if o.kind == "allow_once")
        return schema.RequestPermissionResponse(outcome=schema.AllowedOutcome(outcome="selected", option_id=chosen.option_id))


async def main():
    ws = WORK / "ws-claude"
    ws.mkdir(exist_ok=True)
    editor = Editor()
    async with acp.spawn_agent_process(editor, GATEWAY, "acp", "--config", CONFIG, "--agent", "claude", cwd=str(WORK)) as (conn, _p):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
        r = await conn.prompt(session_id=sid, prompt=[schema.TextContentBlock(type="text", text="hello claude")])
        check(r.stop_reason == "end_turn", "a plain turn on claude-agent-acp ends with end_turn")
        said = "".join(u.content.text for u in editor.updates if u.session_update == "agent_message_chunk" and hasattr(u.content, "text"))
        check("echo: hello claude" in said, f"its reply streamed to the editor ({said!r})")

        editor.updates = []
        prompt = 'tool:Bash {"command": "touch made-by-claude.txt", "description": "create a file"}'
        r = await conn.prompt(session_id=sid, prompt=[schema.TextContentBlock(type="text", text=prompt)])
        check(r.stop_reason == "end_turn", f"the tool turn ends with end_turn ({r.stop_reason})")
        check(len(editor.permissions) == 1, f"claude-agent-acp's permission request reached the editor ({len(editor.permissions)})")
        check(any(o.kind == "allow_once" for o in editor.permissions[0][1]), "the editor was offered the gateway's options")
        calls = [u for u in editor.updates if u.session_update in ("tool_call", "tool_call_update")]
        check(any(getattr(u, "status", None) == "completed" for u in calls), "the tool call was reported completed")
        check((ws / "made-by-claude.txt").exists(), "the approved command ran in the session's workspace")


if __name__ == "__main__":
    run(main, 240)
