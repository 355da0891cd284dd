"""What an editor sees of claude-agent-acp (npm @agentclientprotocol/claude-agent-acp@0.101.0)
connected directly, against what it sees through `gateway acp` (ADR 0028), with the Python ACP
SDK (schema-validated frames) as the editor and the Anthropic API stub as the model.

Usage: claude_diff.py GATEWAY_BIN CONFIG WORKDIR AGENT_JS STUB_URL HOME

Both editors run the same script in the same directory: a prompt that makes the model call
TodoWrite (claude-agent-acp reports a plan), then a mode and a model set by the editor, then a
plain prompt. Compared, ids and timestamps aside: the modes and settings (the `session/new`
answers; through the gateway also `session/resume` after the first prompt, and `session/load`
after a gateway restart, before the agent runs again), the last plan and command list, the
kinds of update seen during a turn, the agent's usage, the settings the agent answers a change with; and the model the
second prompt ran on (the agent's usage names it), so the editor's choices reached the agent.
"""

import asyncio
import os
import sys
from pathlib import Path

import acp
from acp import schema
from tap import check, run

GATEWAY, CONFIG, WORK, AGENT_JS, STUB_URL, HOME = sys.argv[1:7]
WORK = Path(WORK)
# The stub keeps a prompt cache per API key (the API's is per organization): each side gets
# a key no earlier step used, so both start as cold and their usage compares like with like.
DIFF_CONFIG = Path(CONFIG).with_name("gateway-diff.toml")
DIFF_CONFIG.write_text(Path(CONFIG).read_text().replace('ANTHROPIC_API_KEY = "dummy-through-gateway"',
                                                         'ANTHROPIC_API_KEY = "dummy-diff-through-gateway"'))
CONFIG = str(DIFF_CONFIG)
TODO = 'tool:TodoWrite {"todos": [{"content": "step one", "status": "pending", "activeForm": "doing step one"}]}'
AGENT_ENV = {"IS_SANDBOX": "1", "HOME": HOME, "ANTHROPIC_BASE_URL": STUB_URL, "ANTHROPIC_API_KEY": "dummy-diff-direct",
             "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}


class Editor:
    def __init__(self):
        self.updates = []

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append(update.model_dump(mode="json", by_alias=True, exclude_none=True))

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        chosen = next(o for o in options if o.kind == "allow_once")
        return schema.RequestPermissionResponse(outcome=schema.AllowedOutcome(outcome="selected", option_id=chosen.option_id))

    def last(self, kind):
        found = [u for u in self.updates if u["sessionUpdate"] == kind]
        return found[-1] if found else None


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True) if model is not None else None


def options(answer):
    return [dump(getattr(o, "root", o)) for o in answer.config_options or []]


def text(t):
    return [schema.TextContentBlock(type="text", text=t)]


def kinds(updates):
    return {u["sessionUpdate"] for u in updates}


def model_of(editor):
    usage = editor.last("usage_update")
    return (usage or {}).get("_meta", {}).get("_claude/model")


async def session_script(conn, editor, sid):
    """The two prompts with the settings between them; returns what the editor saw."""
    seen = {}
    r = await conn.prompt(session_id=sid, prompt=text(TODO))
    seen["first_stop"] = r.stop_reason
    seen["first_usage"] = dump(r.usage)
    await asyncio.sleep(0.5)
    seen["first"] = list(editor.updates)
    editor.updates.clear()
    await conn.set_session_mode(session_id=sid, mode_id="acceptEdits")
    answer = await conn.set_config_option(session_id=sid, config_id="model", value="sonnet")
    seen["set_options"] = options(answer)
    r = await conn.prompt(session_id=sid, prompt=text("hello again"))
    seen["second_stop"] = r.stop_reason
    await asyncio.sleep(0.5)
    seen["second"] = list(editor.updates)
    seen["second_model"] = model_of(editor)
    return seen


async def main():
    ws = WORK / "ws-diff"
    ws.mkdir(exist_ok=True)

    # Directly.
    direct = Editor()
    env = dict(os.environ, **AGENT_ENV)
    async with acp.spawn_agent_process(direct, "node", AGENT_JS, env=env, cwd=str(WORK)) as (conn, _p):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        new = await conn.new_session(cwd=str(ws), mcp_servers=[])
        d_modes, d_options = dump(new.modes), options(new)
        d = await session_script(conn, direct, new.session_id)
    check(d_modes and d_options and d["first_stop"] == "end_turn", "connected directly, the agent answers with modes and settings")

    # Through the gateway.
    through = Editor()
    async with acp.spawn_agent_process(through, GATEWAY, "acp", "--config", CONFIG, "--agent", "claude",
                                       cwd=str(WORK)) as (conn, _p):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        new = await conn.new_session(cwd=str(ws), mcp_servers=[])
        sid = new.session_id
        check(dump(new.modes) == d_modes, f"session/new answers with the direct session's modes ({dump(new.modes)})")
        check(options(new) == d_options, "session/new answers with the direct session's settings")
        r = await conn.prompt(session_id=sid, prompt=text(TODO))
        await asyncio.sleep(0.5)
        g_first = list(through.updates)
        through.updates.clear()
        loaded = await conn.resume_session(cwd=str(ws), session_id=sid, mcp_servers=[])
        check(r.stop_reason == "end_turn", "through the gateway, the first prompt ends with end_turn")
        check(dump(r.usage) == d["first_usage"] and d["first_usage"],
              f"the prompt's usage is the agent's ({dump(r.usage)} / {d['first_usage']})")
        check(dump(loaded.modes) == d_modes, f"the modes equal the direct session's ({dump(loaded.modes)})")
        check(options(loaded) == d_options, "the settings equal the direct session's")
        for kind in ("plan", "available_commands_update"):
            g_last = [u for u in g_first if u["sessionUpdate"] == kind][-1:]
            d_last = [u for u in d["first"] if u["sessionUpdate"] == kind][-1:]
            check(g_last == d_last and g_last, f"the last {kind} equals the direct session's")
        # The agent titles the session a few seconds after its first answer, between turns:
        # what it says then reaches the editor with the next turn (ADR 0028), so the title is
        # left out here.
        check(kinds(d["first"]) - {"session_info_update"} <= kinds(g_first),
              f"every kind of update the agent sent during the turn arrives ({kinds(d['first']) - kinds(g_first)} missing)")
        g_usage = [u for u in g_first if u["sessionUpdate"] == "usage_update"][-1]
        d_usage = [u for u in d["first"] if u["sessionUpdate"] == "usage_update"][-1]
        check(g_usage["size"] == d_usage["size"] and ("cost" in g_usage) == ("cost" in d_usage),
              f"the agent's usage reaches the editor ({g_usage} / {d_usage})")

        await conn.set_session_mode(session_id=sid, mode_id="acceptEdits")
        answer = await conn.set_config_option(session_id=sid, config_id="model", value="sonnet")
        check(options(answer) == d["set_options"], "the agent's answer to a setting equals the direct one")
        r = await conn.prompt(session_id=sid, prompt=text("hello again"))
        await asyncio.sleep(0.5)
        check(r.stop_reason == "end_turn", "the second prompt ends with end_turn")
        check(model_of(through) == d["second_model"] == "claude-sonnet-5-5",
              f"the model the editor chose reached the agent ({model_of(through)}, directly {d['second_model']})")
        after = await conn.resume_session(cwd=str(ws), session_id=sid, mcp_servers=[])
        current = {o["id"]: o["currentValue"] for o in options(after)}
        check(dump(after.modes)["currentModeId"] == "acceptEdits" and current.get("model") == "sonnet",
              f"the session keeps the mode and model the agent reported ({current})")

    # A new gateway process: load shows the last known modes, settings and commands before
    # the agent runs again.
    again = Editor()
    async with acp.spawn_agent_process(again, GATEWAY, "acp", "--config", CONFIG, "--agent", "claude",
                                       cwd=str(WORK)) as (conn, _p):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        loaded = await conn.load_session(cwd=str(ws), session_id=sid, mcp_servers=[])
        check(dump(loaded.modes)["currentModeId"] == "acceptEdits", "after a restart, load shows the agent's modes")
        check(options(loaded) == d["set_options"], "after a restart, load shows its settings as it last reported them")
        check(again.last("available_commands_update") == [u for u in d["first"] if u["sessionUpdate"] == "available_commands_update"][-1],
              "after a restart, load replays its commands")
        check(again.last("plan") is not None, "after a restart, load replays its plan")
        # No agent process runs in this gateway process yet: the mode is kept, sent before the
        # next prompt, and what the agent accepted is kept with the session.
        await conn.set_session_mode(session_id=sid, mode_id="plan")
        r = await conn.prompt(session_id=sid, prompt=text("after the restart"))
        check(r.stop_reason == "end_turn", "after a restart, a prompt starts the agent again")
        after = await conn.resume_session(cwd=str(ws), session_id=sid, mcp_servers=[])
        check(dump(after.modes)["currentModeId"] == "plan", "a mode set while no process ran reached the agent before the prompt")


if __name__ == "__main__":
    run(main, 300)
