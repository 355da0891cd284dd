"""Remote editors: the relay `gateway acp --url` in front of a keyed `gateway serve`, driven by
the Python ACP SDK (agent-client-protocol==0.12.1, whose models check every frame it reads).

Usage: editor_relay.py GATEWAY_BIN CONFIG WORKDIR

Starts `gateway serve --config CONFIG` itself (on a free port, WORKDIR as its directory), so that
it can kill it and start it again on the same port, and checks:

- a wrong key: `initialize` still answers, offering the terminal sign-in
  `gateway login --url URL`; `session/new` is refused with ACP's auth-required error (-32000);
- with the right key (GATEWAY_API_KEY): a prompt, a permission round trip, a cancel mid-turn;
  an editor's stdio MCP server (server-everything) runs under the relay, on the editor's side,
  and its tools answer the native agent through the connection;
- the server killed (SIGKILL) mid-turn and started again: the prompt in flight is answered once,
  in the same session, and the editor's next prompt is answered there too; loading the session on
  a new connection shows each prompt once (nothing lost, nothing admitted twice);
- `gateway login --url URL` stores a key (mode 0600) the relay then uses without
  GATEWAY_API_KEY, and `gateway logout --url URL` forgets it.
"""

import asyncio
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import acp
from acp import schema
from recording import RecordingEditor as Editor
from tap import check, run

GATEWAY, CONFIG, WORK = sys.argv[1], sys.argv[2], Path(sys.argv[3])
EVERYTHING = Path(__file__).resolve().parents[3] / ".cache/npm-mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PORT = free_port()
URL = f"http://127.0.0.1:{PORT}"


class Server:
    """`gateway serve` on PORT, killed and started again by the test."""

    def __init__(self):
        self.proc = None
        self.starts = 0

    async def start(self):
        self.starts += 1
        env = dict(os.environ, GATEWAY_LISTEN=f"127.0.0.1:{PORT}")
        log = open(WORK / f"serve-{self.starts}.log", "wb")
        self.proc = await asyncio.create_subprocess_exec(
            GATEWAY, "serve", "--config", CONFIG, cwd=str(WORK), env=env, stdout=log, stderr=subprocess.STDOUT
        )
        for _ in range(300):
            try:
                _, w = await asyncio.open_connection("127.0.0.1", PORT)
                w.close()
                return
            except OSError:
                await asyncio.sleep(0.1)
        raise RuntimeError(f"gateway serve did not listen; see {WORK}/serve-{self.starts}.log")

    async def kill(self):
        self.proc.kill()
        await self.proc.wait()

    async def stop(self):
        if self.proc and self.proc.returncode is None:
            self.proc.terminate()
            await self.proc.wait()


def text(t):
    return schema.TextContentBlock(type="text", text=t)


def relay(editor, key, home):
    env = {k: v for k, v in os.environ.items() if k != "GATEWAY_API_KEY"}
    env["XDG_CONFIG_HOME"] = str(home)
    env["RELAY_MARKER"] = "the-editor-side"
    if key is not None:
        env["GATEWAY_API_KEY"] = key
    return acp.spawn_agent_process(editor, GATEWAY, "acp", "--url", URL, cwd=str(WORK), env=env)


async def initialize(conn):
    caps = schema.ClientCapabilities(auth=schema.AuthCapabilities(terminal=True))
    return await conn.initialize(
        protocol_version=acp.PROTOCOL_VERSION, client_capabilities=caps,
        client_info=schema.Implementation(name="relay-editor", version="1"),
    )


def create_key():
    out = subprocess.run(
        [GATEWAY, "keys", "create", "--name", "relay", "--config", CONFIG],
        cwd=str(WORK), check=True, capture_output=True, text=True,
    )
    return out.stdout.strip().splitlines()[-1].strip()


async def main():
    projects = WORK / "projects"
    (projects / "relay").mkdir(parents=True, exist_ok=True)
    ws = projects / "relay"
    home = WORK / "home"
    home.mkdir(exist_ok=True)
    key = create_key()
    server = Server()
    await server.start()
    try:
        await scenario(server, key, ws, home)
    finally:
        await server.stop()


async def scenario(server, key, ws, home):
    # A wrong key: the editor can still talk to the relay, and is told how to sign in.
    async with relay(Editor(), "gw_wrong_key", home) as (conn, _):
        init = await initialize(conn)
        methods = {m.root.id if hasattr(m, "root") else m.id: (m.root if hasattr(m, "root") else m) for m in init.auth_methods}
        login = methods.get("gateway-login")
        check(login is not None and login.type == "terminal" and login.args == ["login", "--url", URL],
              f"a refused key: initialize offers the terminal sign-in `gateway login --url` ({init.auth_methods})")
        try:
            await conn.new_session(cwd=str(ws), mcp_servers=[])
            check(False, "a refused key cannot open a session")
        except acp.RequestError as e:
            check(e.code == -32000 and "gateway login --url" in str(e),
                  f"a refused key: session/new answers auth-required (-32000) naming the sign-in ({e.code} {e})")

    editor = Editor()
    async with relay(editor, key, home) as (conn, _):
        init = await initialize(conn)
        check(init.agent_capabilities.load_session, "through the relay, initialize is the gateway's (loadSession)")
        sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
        check(sid.startswith("sesn_"), "session/new through the relay opens a gateway session")

        r = await conn.prompt(session_id=sid, prompt=[text("hello relay")])
        check(r.stop_reason == "end_turn" and editor.text(sid) == "echo: hello relay",
              f"a prompt through the relay streams its answer once ({editor.text(sid)!r})")

        r = await conn.prompt(session_id=sid, prompt=[text('tool:write {"file_path": "relayed.txt", "content": "yes"}')])
        check(r.stop_reason == "end_turn" and len(editor.permissions) == 1 and (ws / "relayed.txt").read_text() == "yes",
              "a permission request crosses the relay and its answer comes back")

        editor.in_progress.clear()
        long = asyncio.create_task(conn.prompt(session_id=sid, prompt=[text('tool:bash {"command": "sleep 30"}')]))
        await asyncio.wait_for(editor.in_progress.wait(), 30)
        await conn.cancel(session_id=sid)
        r = await asyncio.wait_for(long, 30)
        check(r.stop_reason == "cancelled", f"a cancel crosses the relay ({r.stop_reason})")

        # The editor's stdio MCP server runs on the editor's side, under the relay (ADR 0032):
        # its environment is the relay's (the marker set for it), not a gateway sandbox's.
        stdio_server = schema.McpServerStdio(name="everything", command="node", args=[str(EVERYTHING), "stdio"],
                                             env=[schema.EnvVariable(name="EVERYTHING_NOTE", value="from-the-editor")])
        s_mcp = (await conn.new_session(cwd=str(ws), mcp_servers=[stdio_server])).session_id
        r = await conn.prompt(session_id=s_mcp, prompt=[text('tool:everything/echo {"message": "through the relay"}')])
        check(r.stop_reason == "end_turn" and editor.results()[-1] == ("completed", "Echo: through the relay"),
              f"a tool of the editor's stdio MCP server answers through the relay: {editor.results()[-1:]}")
        r = await conn.prompt(session_id=s_mcp, prompt=[text("tool:everything/get-env {}")])
        shown = editor.results()[-1][1]
        check(r.stop_reason == "end_turn" and "RELAY_MARKER" in shown and "from-the-editor" in shown,
              f"the server ran on the editor's side, with the relay's environment and its own: {shown[:200]!r}")

        # The server dies mid-turn and comes back: the prompt in flight is answered once.
        editor.in_progress.clear()
        before = len(editor.text(sid))
        calls_before = editor.kinds(sid).count("tool_call")
        inflight = asyncio.create_task(conn.prompt(session_id=sid, prompt=[text('tool:bash {"command": "sleep 2; echo slept"}')]))
        await asyncio.wait_for(editor.in_progress.wait(), 30)
        await server.kill()
        await asyncio.sleep(0.5)
        await server.start()
        r = await asyncio.wait_for(inflight, 120)
        check(r.stop_reason == "end_turn", f"the prompt in flight when the server died is answered ({r.stop_reason})")
        after = editor.text(sid)[before:]
        check(after.count("done:") == 1, f"its answer reaches the editor once: {after!r}")
        check(editor.kinds(sid).count("tool_call") == calls_before + 1,
              "what the editor saw before the crash is not sent again (one tool_call for the call)")

        r = await conn.prompt(session_id=sid, prompt=[text("after the restart")])
        check(r.stop_reason == "end_turn" and editor.text(sid).endswith("echo: after the restart"),
              "the editor's next prompt is answered in the same session")

        # Killed between prompts: the next prompt reconnects first.
        await server.kill()
        await server.start()
        r = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text("second restart")]), 120)
        check(r.stop_reason == "end_turn" and editor.text(sid).endswith("echo: second restart"),
              "a prompt sent while the relay reconnects is answered once it has")

    # A new connection loads the session: every prompt is in it once.
    loader = Editor()
    async with relay(loader, key, home) as (conn, _):
        await initialize(conn)
        await conn.load_session(cwd=str(ws), session_id=sid, mcp_servers=[])
        users = [u.content.text for u in loader.updates.get(sid, []) if u.session_update == "user_message_chunk"]
        slept = [u for u in users if "sleep 2; echo slept" in u]
        check(len(slept) == 1, f"the prompt sent again after the crash was admitted once ({len(slept)})")
        check(users.count("after the restart") == 1 and users.count("second restart") == 1 and users.count("hello relay") == 1,
              f"every prompt is in the session once: {users}")

    # `gateway login --url` keeps the key for the relay; `gateway logout --url` forgets it.
    env = {k: v for k, v in os.environ.items() if k != "GATEWAY_API_KEY"}
    env["XDG_CONFIG_HOME"] = str(home)
    subprocess.run([GATEWAY, "login", "--url", URL], input=key + "\n", text=True, env=env, check=True, capture_output=True)
    stored = home / "gateway" / "credentials.toml"
    check(stat.S_IMODE(stored.stat().st_mode) == 0o600, "gateway login --url stores the key for the user alone")
    stored_editor = Editor()
    async with relay(stored_editor, None, home) as (conn, _):
        await initialize(conn)
        s2 = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
        r = await conn.prompt(session_id=s2, prompt=[text("stored key")])
        check(r.stop_reason == "end_turn", "the relay uses the key gateway login --url stored")
    out = subprocess.run([GATEWAY, "logout", "--url", URL], env=env, check=True, capture_output=True, text=True)
    check("forgotten" in out.stderr and not stored.exists(), "gateway logout --url forgets it")


if __name__ == "__main__":
    run(main, 400)
