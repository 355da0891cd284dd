"""A native agent's context compaction as an editor sees it, driven by the Python ACP SDK.

Usage: editor_compaction.py GATEWAY_BIN CONFIG WORKDIR

CONFIG publishes agent `main` on `[models.small]` (the fake model with `context_window =
10000`). Two prompts of 12,000 characters each outgrow the window: the second turn compacts the
first and still answers. The editor sees the summary as a thought, live; `usage_update` reports
the configured window; a second `gateway acp` process loading the session replays the same
history, the compaction included. Exits non-zero on the first failure.
"""

import os
import sys
from pathlib import Path

import acp
from acp import schema
from recording import RecordingEditor as Editor
from tap import check, run

GATEWAY, CONFIG, WORK = sys.argv[1], sys.argv[2], Path(sys.argv[3])
FIRST, SECOND = "first " + "a" * 12000, "second " + "b" * 12000
COMPACTED = "Context compacted."


def text(t):
    return schema.TextContentBlock(type="text", text=t)


def thoughts(updates):
    return [u.content.text for u in updates if u.session_update == "agent_thought_chunk"]


async def main():
    ws = WORK / "ws-compaction"
    ws.mkdir(exist_ok=True)
    env = dict(os.environ)
    editor = Editor()
    async with acp.spawn_agent_process(editor, GATEWAY, "acp", "--config", CONFIG, cwd=str(WORK), env=env) as (conn, _):
        await conn.initialize(protocol_version=1)
        sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
        r = await conn.prompt(session_id=sid, prompt=[text(FIRST)])
        check(r.stop_reason == "end_turn" and editor.text(sid) == f"echo: {FIRST}", "the first turn fits and answers")
        check(not any(COMPACTED in t for t in thoughts(editor.updates[sid])), "nothing is compacted while it fits")
        sizes = {u.size for u in editor.updates[sid] if u.session_update == "usage_update"}
        check(sizes == {10000}, f"usage_update reports the configured context window ({sizes})")
        seen = len(editor.updates[sid])
        r = await conn.prompt(session_id=sid, prompt=[text(SECOND)])
        live = editor.updates[sid][seen:]
        check(r.stop_reason == "end_turn" and editor.text(sid).endswith(f"echo: {SECOND}"),
              "the second turn compacts the first and still answers")
        summary = [t for t in thoughts(live) if t.startswith(COMPACTED)]
        check(len(summary) == 1, f"the compaction is shown once, live, as a thought ({len(summary)})")

    # Another process, another editor: the session's history, compaction included, from the log.
    again = Editor()
    async with acp.spawn_agent_process(again, GATEWAY, "acp", "--config", CONFIG, cwd=str(WORK), env=env) as (conn, _):
        await conn.initialize(protocol_version=1)
        await conn.load_session(cwd=str(ws), session_id=sid, mcp_servers=[])
        replay = again.updates.get(sid, [])
        kinds = [u.session_update for u in replay]
        user = "".join(u.content.text for u in replay if u.session_update == "user_message_chunk")
        check(FIRST in user and SECOND in user, "load replays both messages: the log keeps what was compacted")
        check(thoughts(replay) == [t for t in summary], "load replays the same compaction, with its summary")
        at = kinds.index("agent_thought_chunk")
        answers = [i for i, k in enumerate(kinds) if k == "agent_message_chunk"]
        check(answers and answers[0] < at < answers[-1], "the compaction sits between the two answers")


if __name__ == "__main__":
    run(main, 180)
