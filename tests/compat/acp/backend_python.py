"""The backend face: `acp:` agents run by the gateway, driven through `gateway acp` by the Python
ACP SDK (agent-client-protocol==0.12.1) as the editor.

Usage: backend_python.py GATEWAY_BIN CONFIG WORKDIR

Agents (see run-acp's config): `tsagent` (agent_ts.mjs on the TypeScript SDK: fs, terminal,
permission, cancel) and `adversary` (adversarial_agent.py: unknown update kinds and stop reasons,
a crash mid-turn, silence until the turn deadline). Exits non-zero on the first failure.
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
        self.answer_kind = "allow_once"
        self.ticked = asyncio.Event()

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append(update)
        if update.session_update == "agent_message_chunk" and getattr(update.content, "text", "").startswith("tick"):
            self.ticked.set()

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.permissions.append(tool_call)
        chosen = next(o for o in options if o.kind == self.answer_kind)
        return schema.RequestPermissionResponse(outcome=schema.AllowedOutcome(outcome="selected", option_id=chosen.option_id))

    def take_text(self, kind="agent_message_chunk"):
        t = "".join(u.content.text for u in self.updates if u.session_update == kind and hasattr(u.content, "text"))
        return t

    def reset(self):
        self.updates = []


def text(t):
    return schema.TextContentBlock(type="text", text=t)


async def connect(editor, agent):
    cm = acp.spawn_agent_process(editor, GATEWAY, "acp", "--config", CONFIG, "--agent", agent, cwd=str(WORK))
    conn, _proc = await cm.__aenter__()
    await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
    return cm, conn


async def ts_agent():
    ws = WORK / "ws-backend-ts"
    ws.mkdir(exist_ok=True)
    (ws / "input.txt").write_text("hello files\n")
    editor = Editor()
    cm, conn = await connect(editor, "tsagent")
    try:
        sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id

        r = await conn.prompt(session_id=sid, prompt=[text("hello agent")])
        check(r.stop_reason == "end_turn", "a turn on the TypeScript agent ends with end_turn")
        check(editor.take_text() == "agent says: hello agent", f"its streamed text arrives whole, once ({editor.take_text()!r})")
        check(editor.take_text("agent_thought_chunk") == "thinking about it", "its thought arrives as agent_thought_chunk")

        editor.reset()
        r = await conn.prompt(session_id=sid, prompt=[text("files")])
        check(r.stop_reason == "end_turn", "the files turn ends with end_turn")
        check((ws / "sub" / "output.txt").read_text() == "HELLO FILES\n", "fs/read_text_file and fs/write_text_file work in the workspace")
        check("outside: refused -32602" in editor.take_text(), f"a read outside the workspace is refused ({editor.take_text()!r})")
        statuses = [u.status for u in editor.updates if u.session_update == "tool_call_update"]
        check(statuses.count("completed") == 2, f"the agent's tool calls are shown completed ({statuses})")

        editor.reset()
        r = await conn.prompt(session_id=sid, prompt=[text("terminal")])
        check(r.stop_reason == "end_turn", "the terminal turn ends with end_turn")
        check(editor.take_text() == "terminal exit 4: term-out hi-env", f"terminal/* ran the command with its env ({editor.take_text()!r})")

        editor.reset()
        r = await conn.prompt(session_id=sid, prompt=[text("permission")])
        check(r.stop_reason == "end_turn", "the permission turn ends with end_turn")
        check(len(editor.permissions) == 1 and editor.permissions[0].title == "Write approved.txt", "the agent's permission request reached the editor")
        check((ws / "approved.txt").read_text() == "approved", "the approved action happened")
        check(editor.take_text() == "permission: allowed", "the agent saw the approval")

        editor.reset()
        editor.answer_kind = "reject_once"
        r = await conn.prompt(session_id=sid, prompt=[text("permission")])
        check(r.stop_reason == "end_turn" and editor.take_text() == "permission: rejected", "a rejection reaches the agent")

        editor.reset()
        slow = asyncio.create_task(conn.prompt(session_id=sid, prompt=[text("slow")]))
        await asyncio.wait_for(editor.ticked.wait(), 20)
        await conn.cancel(session_id=sid)
        r = await asyncio.wait_for(slow, 20)
        check(r.stop_reason == "cancelled", f"a cancel reaches the agent and the prompt ends cancelled ({r.stop_reason})")

        editor.reset()
        r = await conn.prompt(session_id=sid, prompt=[text("again")])
        check(r.stop_reason == "end_turn" and editor.take_text() == "agent says: again", "the same agent process serves the next turn")
        editor.reset()
        r = await conn.prompt(session_id=sid, prompt=[text("whoami")])
        first = editor.take_text()
        check(first.endswith("loaded=false"), f"the agent's own session was made with session/new ({first!r})")
    finally:
        await cm.__aexit__(None, None, None)

    # A new gateway process (as after a restart) starts a new agent process, which reopens the
    # agent's session with session/load because it advertises loadSession.
    editor = Editor()
    cm, conn = await connect(editor, "tsagent")
    try:
        await conn.load_session(cwd=str(ws), session_id=sid, mcp_servers=[])
        editor.reset()
        r = await conn.prompt(session_id=sid, prompt=[text("whoami")])
        again = editor.take_text()
        check(r.stop_reason == "end_turn" and again == first.replace("loaded=false", "loaded=true"),
              f"after a gateway restart the agent's session is reopened with session/load ({again!r})")
        check("replayed history" not in again, "the agent's load replay is not shown again")
    finally:
        await cm.__aexit__(None, None, None)


async def adversary():
    ws = WORK / "ws-backend-adv"
    ws.mkdir(exist_ok=True)
    editor = Editor()
    cm, conn = await connect(editor, "adversary")
    try:
        sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
        r = await conn.prompt(session_id=sid, prompt=[text("unknown-kind")])
        check(r.stop_reason == "end_turn" and editor.take_text() == "after unknown kinds", "unknown update kinds are skipped, the turn goes on")

        editor.reset()
        r = await conn.prompt(session_id=sid, prompt=[text("unknown-stop")])
        check(r.stop_reason == "end_turn", f"an unknown stop reason ends the turn as end_turn ({r.stop_reason})")
        check(editor.take_text() == "before an unknown stop reason", "the text before it was kept")

        editor.reset()
        try:
            await conn.prompt(session_id=sid, prompt=[text("crash")])
            check(False, "a crash mid-turn fails the prompt")
        except acp.RequestError as e:
            check("exited during the turn" in str(e.data or e) or "exited during the turn" in str(e), f"a crash mid-turn is an error naming it ({e})")
        r = await conn.prompt(session_id=sid, prompt=[text("after crash")])
        check(r.stop_reason == "end_turn", "the next turn respawns the agent")
        check("adversary: after crash" in editor.take_text(), "the respawned agent answered")

        try:
            await conn.prompt(session_id=sid, prompt=[text("silent")])
            check(False, "a silent agent fails the prompt at the deadline")
        except acp.RequestError as e:
            check("did not finish the turn within" in str(e), f"the turn deadline ends a silent agent's turn ({e})")
        editor.reset()
        r = await conn.prompt(session_id=sid, prompt=[text("still usable")])
        check(r.stop_reason == "end_turn" and "adversary: still usable" in editor.take_text(), "the session works after the deadline")
    finally:
        await cm.__aexit__(None, None, None)


async def main():
    await ts_agent()
    await adversary()


if __name__ == "__main__":
    run(main, 240)
