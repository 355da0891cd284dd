"""The editor face of `gateway acp`, driven by the Python ACP SDK (agent-client-protocol==0.12.1).

Usage: editor_python.py GATEWAY_BIN CONFIG WORKDIR

Starts `gateway acp --config CONFIG` in WORKDIR (its SQLite database lives there) and checks what
an editor sees: initialize, session/new, a streamed prompt (no text twice), a permission round
trip answered by option kind (with "always allow" remembered), a cancel mid-turn (stopReason
`cancelled`) while a second session keeps working, session/load replaying the history, and
session/list showing both sessions. Exits non-zero on the first failure.
"""

import asyncio
import os
import sys
from pathlib import Path

import acp
from acp import schema
from recording import RecordingEditor as Editor
from tap import check, run

GATEWAY, CONFIG, WORK = sys.argv[1], sys.argv[2], Path(sys.argv[3])


def option(o):
    """A config option (the SDK wraps the select/boolean union in a RootModel)."""
    return getattr(o, "root", o)


def text(t):
    return schema.TextContentBlock(type="text", text=t)


async def main():
    ws1, ws2 = WORK / "ws-python-1", WORK / "ws-python-2"
    ws1.mkdir(exist_ok=True)
    ws2.mkdir(exist_ok=True)
    editor = Editor()
    env = dict(os.environ)
    async with acp.spawn_agent_process(editor, GATEWAY, "acp", "--config", CONFIG, cwd=str(WORK), env=env) as (conn, proc):
        init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_info=schema.Implementation(name="py-editor", version="1"))
        check(init.protocol_version == 1, "initialize answers protocol version 1")
        caps = init.agent_capabilities
        check(caps.load_session and caps.session_capabilities.list is not None, "loadSession and session/list advertised")

        s1 = (await conn.new_session(cwd=str(ws1), mcp_servers=[])).session_id
        s2 = (await conn.new_session(cwd=str(ws2), mcp_servers=[])).session_id
        check(s1.startswith("sesn_") and s1 != s2, "session/new gives gateway session ids")
        try:
            await conn.new_session(cwd="relative/dir", mcp_servers=[])
            check(False, "a relative cwd is refused")
        except acp.RequestError as e:
            check(e.code == -32602, "a relative cwd is refused with -32602")

        r = await conn.prompt(session_id=s1, prompt=[text("hello there")])
        check(r.stop_reason == "end_turn", "a plain prompt ends with end_turn")
        check(editor.text(s1) == "echo: hello there", f"streamed text arrives once and whole: {editor.text(s1)!r}")
        # The session takes its title from its first prompt, and the turn reports its tokens.
        infos = [u for u in editor.updates[s1] if u.session_update == "session_info_update"]
        check(len(infos) == 1 and infos[0].title == "hello there" and infos[0].updated_at,
              f"session_info_update titles the session from its first prompt: {infos}")
        usage = [u for u in editor.updates[s1] if u.session_update == "usage_update"]
        check(len(usage) == 1 and 0 < usage[0].used <= usage[0].size, f"usage_update reports the context: {usage}")
        check(r.usage is not None and r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens > 0,
              f"the prompt response carries the turn's usage: {r.usage}")

        editor.answer_kind = "allow_always"
        r = await conn.prompt(session_id=s1, prompt=[text('tool:write {"file_path": "perm.txt", "content": "granted"}')])
        check(r.stop_reason == "end_turn", "the permission prompt ends with end_turn")
        check(len(editor.permissions) == 1 and editor.permissions[0][0] == s1, "one permission request was made")
        check((ws1 / "perm.txt").read_text() == "granted", "the approved write reached the editor's cwd")
        kinds = editor.kinds(s1)
        check("tool_call" in kinds and "tool_call_update" in kinds, "tool_call and tool_call_update were streamed")
        done = [u for u in editor.updates[s1] if u.session_update == "tool_call_update" and u.status == "completed"]
        check(len(done) == 1, "the tool call completed")

        r = await conn.prompt(session_id=s1, prompt=[text('tool:write {"file_path": "again.txt", "content": "remembered"}')])
        check(r.stop_reason == "end_turn" and len(editor.permissions) == 1, "allow_always is remembered for the session")
        check((ws1 / "again.txt").read_text() == "remembered", "the remembered write happened")

        # Cancel a long command in session 1 while session 2 keeps working.
        editor.answer_kind = "allow_once"
        editor.in_progress.clear()
        long = asyncio.create_task(conn.prompt(session_id=s1, prompt=[text('tool:bash {"command": "sleep 30"}')]))
        await asyncio.wait_for(editor.in_progress.wait(), 20)
        other = asyncio.create_task(conn.prompt(session_id=s2, prompt=[text("second session works")]))
        await conn.cancel(session_id=s1)
        r1 = await asyncio.wait_for(long, 20)
        check(r1.stop_reason == "cancelled", f"the cancelled prompt ends with stopReason cancelled ({r1.stop_reason})")
        r2 = await asyncio.wait_for(other, 20)
        check(r2.stop_reason == "end_turn" and editor.text(s2) == "echo: second session works", "the other session was unaffected")

        seen = len(editor.text(s1))
        r = await conn.prompt(session_id=s1, prompt=[text("after the cancel")])
        check(r.stop_reason == "end_turn", "the session takes prompts after a cancel")
        check(editor.text(s1)[seen:] == "echo: after the cancel",
              f"the prompt after a cancel is what is answered: {editor.text(s1)[seen:]!r}")

        # session/load replays the durable history.
        before = len(editor.updates[s1])
        await conn.load_session(cwd=str(ws1), session_id=s1, mcp_servers=[])
        replay = editor.updates[s1][before:]
        user = "".join(u.content.text for u in replay if u.session_update == "user_message_chunk")
        agent = "".join(u.content.text for u in replay if u.session_update == "agent_message_chunk")
        check("hello there" in user and "after the cancel" in user, "load replays the user's messages")
        check("echo: hello there" in agent and "done: wrote 7 bytes to perm.txt" in agent, f"load replays the agent's messages: {agent!r}")
        check(any(u.session_update == "tool_call" for u in replay), "load replays tool calls")

        # The agent is a config option when several agents are published (run-acp publishes
        # `main`, whose bash asks, and `trusted`, whose bash does not).
        ws3 = WORK / "ws-python-3"
        ws3.mkdir(exist_ok=True)
        created = await conn.new_session(cwd=str(ws3), mcp_servers=[])
        s3 = created.session_id
        opts = {option(o).id: option(o) for o in created.config_options or []}
        check("agent" in opts and opts["agent"].current_value == "main", "session/new offers the agent as a config option")
        changed = await conn.set_config_option(config_id="agent", session_id=s3, value="trusted")
        now = [option(o) for o in changed.config_options]
        check(now[0].current_value == "trusted", "set_config_option switches the agent before the first prompt")
        asked = len(editor.permissions)
        r = await conn.prompt(session_id=s3, prompt=[text('tool:bash {"command": "echo switched > switched.txt"}')])
        check(r.stop_reason == "end_turn" and len(editor.permissions) == asked, "the switched agent runs bash without asking")
        check((ws3 / "switched.txt").read_text() == "switched\n", "the switched agent worked in the session's cwd")
        try:
            await conn.set_config_option(config_id="agent", session_id=s3, value="main")
            check(False, "the agent cannot change after the first prompt")
        except acp.RequestError as e:
            check(e.code == -32602, "the agent cannot change after the first prompt (-32602)")

        # The permission preset of a native session, between prompts (s1's agent `main` asks
        # before bash).
        opts = {option(o).id: option(o) for o in created.config_options or []}
        check(opts["permissions"].current_value == "as_defined" and opts["permissions"].category == "mode",
              "session/new offers the permission preset")
        changed = await conn.set_config_option(config_id="permissions", session_id=s1, value="read_only")
        check(next(option(o) for o in changed.config_options if option(o).id == "permissions").current_value == "read_only",
              "set_config_option sets the preset")
        r = await conn.prompt(session_id=s1, prompt=[text('tool:bash {"command": "echo no > readonly.txt"}')])
        check(r.stop_reason == "end_turn" and not (ws1 / "readonly.txt").exists(), "read_only: bash is not offered")
        asked = len(editor.permissions)
        await conn.set_config_option(config_id="permissions", session_id=s1, value="allow_all")
        r = await conn.prompt(session_id=s1, prompt=[text('tool:bash {"command": "echo yes > allowed.txt"}')])
        check(r.stop_reason == "end_turn" and len(editor.permissions) == asked and (ws1 / "allowed.txt").exists(),
              "allow_all: bash runs without asking")
        await conn.set_config_option(config_id="permissions", session_id=s1, value="as_defined")
        editor.answer_kind = "reject_once"
        r = await conn.prompt(session_id=s1, prompt=[text('tool:bash {"command": "echo again > asked.txt"}')])
        check(len(editor.permissions) == asked + 1 and not (ws1 / "asked.txt").exists(),
              "as_defined: bash asks again (and a rejection keeps it from running)")
        editor.answer_kind = "allow_once"
        try:
            await conn.set_config_option(config_id="permissions", session_id=s1, value="everything")
            check(False, "an unknown preset is refused")
        except acp.RequestError as e:
            check(e.code == -32602, "an unknown preset is refused (-32602)")

        # additionalDirectories: another directory the session's tools reach, at its own path.
        check(caps.session_capabilities.additional_directories is not None, "additionalDirectories is advertised")
        extra = WORK / "ws-python-extra"
        extra.mkdir(exist_ok=True)
        (extra / "notes.txt").write_text("kept beside the project\n")
        sx = (await conn.new_session(cwd=str(ws1), mcp_servers=[], additional_directories=[str(extra)])).session_id
        r = await conn.prompt(session_id=sx, prompt=[text(f'tool:read {{"file_path": "{extra}/notes.txt"}}')])
        check(r.stop_reason == "end_turn" and "kept beside the project" in editor.text(sx),
              f"a file in an additional directory is read by its own path ({editor.text(sx)[-120:]!r})")
        r = await conn.prompt(session_id=sx, prompt=[text(f'tool:write {{"file_path": "{extra}/from-agent.txt", "content": "there"}}')])
        check(r.stop_reason == "end_turn" and (extra / "from-agent.txt").read_text() == "there",
              "a write to an additional directory (asked and allowed) reaches it")
        try:
            await conn.new_session(cwd=str(ws1), mcp_servers=[], additional_directories=["/usr/share"])
            check(False, "a system directory is refused")
        except acp.RequestError as e:
            check(e.code == -32602 and "system directory" in str(e), f"a system directory is refused ({e})")
        listed = await conn.list_sessions()
        mine = next(s for s in listed.sessions if s.session_id == sx)
        check(mine.additional_directories == [str(extra)], f"session/list reports the additional directories ({mine})")

        # The model of a native session, between prompts (`main` lists a second model).
        opts = {option(o).id: option(o) for o in created.config_options or []}
        model = opts.get("model")
        check(model is not None and model.category == "model" and model.current_value == "claude-sonnet-4-5"
              and [o.value for o in model.options] == ["claude-sonnet-4-5", "claude-opus-4-5"],
              f"session/new offers the agent's models as the `model` option ({model})")
        changed = await conn.set_config_option(config_id="model", session_id=s1, value="claude-opus-4-5")
        check(next(option(o) for o in changed.config_options if option(o).id == "model").current_value == "claude-opus-4-5",
              "set_config_option sets the model")
        r = await conn.prompt(session_id=s1, prompt=[text("on another model")])
        check(r.stop_reason == "end_turn", "the session runs on the model it was switched to")
        try:
            await conn.set_config_option(config_id="model", session_id=s1, value="gpt-nothing")
            check(False, "a model the agent does not list is refused")
        except acp.RequestError as e:
            check(e.code == -32602 and "claude-opus-4-5" in str(e), f"a model the agent does not list is refused (-32602: {e})")
        reloaded = await conn.load_session(cwd=str(ws1), session_id=s1, mcp_servers=[])
        kept = {option(o).id: option(o) for o in reloaded.config_options or []}
        check(kept["model"].current_value == "claude-opus-4-5" and kept["permissions"].current_value == "as_defined",
              "the model and the preset are kept with the session (session/load shows them)")

        listed = await conn.list_sessions()
        ids = {s.session_id: s.cwd for s in listed.sessions}
        check(ids.get(s1) == str(ws1) and ids.get(s2) == str(ws2), "session/list shows both sessions with their cwd")
        only = await conn.list_sessions(cwd=str(ws2))
        check([s.session_id for s in only.sessions] == [s2], "session/list filters by cwd")
        check(next(s.title for s in listed.sessions if s.session_id == s1) == "hello there", "session/list shows the title")

        # session/delete (this SDK release has no call for it: the request as the schema has it).
        check(init.agent_capabilities.session_capabilities.delete is not None, "session/delete is advertised")
        answer = await conn._conn.send_request("session/delete", {"sessionId": s2})
        check(schema.DeleteSessionResponse.model_validate(answer) is not None, "session/delete answers")
        listed = await conn.list_sessions()
        check(s2 not in {s.session_id for s in listed.sessions}, "a deleted session is no longer listed")
        try:
            await conn.load_session(cwd=str(ws2), session_id=s2, mcp_servers=[])
            check(False, "a deleted session cannot be loaded")
        except acp.RequestError as e:
            check(e.code == -32002, f"a deleted session cannot be loaded (-32002: {e.code})")


if __name__ == "__main__":
    run(main, 180)
