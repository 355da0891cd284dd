"""An editor signs in to `gateway acp` (ADR 0026) and finds its state and its errors (ADR 0029), driven by the Python ACP SDK
(agent-client-protocol==0.12.1, which validates every frame against the ACP schema).

Usage: editor_auth.py GATEWAY_BIN CONFIG WORKDIR STUB_BIN [REGISTRY_DIR]

The gateway's model is "anthropic" pointed at the Anthropic API stub, and its environment holds
no ANTHROPIC_API_KEY: the process must still answer the editor, advertise a sign-in the ACP
registry accepts, refuse native sessions with the auth error (-32000) until the user has run
the advertised terminal method (`gateway login`, the key typed on stdin), then run them with
that key (the stub saw it), and forget it at `logout`. The key never appears in the gateway's
log, and the stored file is readable by the user alone.

REGISTRY_DIR, when given, holds files of the ACP registry (agentclientprotocol/registry, copied
by run-acp from a fetched snapshot outside this repository): its CI's `client.py`, whose
`run_auth_check` is run against `gateway acp` as the registry runs it, and `build_registry.py`
with `agent.schema.json`, which validate this repository's manifest (`compat/acp-registry/`)
as a registry pull request would be (all but the checks that need the network).
"""

import asyncio
import importlib.util
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import acp
from acp import schema
from tap import check, run

GATEWAY, CONFIG, WORK, STUB = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
REGISTRY = Path(sys.argv[5]) if len(sys.argv) > 5 else None
MANIFEST = Path(__file__).resolve().parents[3] / "compat/acp-registry"
KEY = "sk-ant-editor-login-7f3a9c"


class Editor:
    def __init__(self):
        self.updates = []

    def on_connect(self, conn):
        self.conn = conn

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append(update)

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        raise AssertionError("no permission is asked in this script")


def text(t):
    return schema.TextContentBlock(type="text", text=t)


async def refused(call, what):
    try:
        await call
    except acp.RequestError as e:
        check(e.code == -32000, f"{what} is refused with the auth error -32000 ({e.code}: {e})")
        return
    check(False, f"{what} is refused")


async def main():
    home = WORK / "home"
    (home / ".config").mkdir(parents=True, exist_ok=True)
    ws = WORK / "ws-auth"
    ws.mkdir(exist_ok=True)
    stub = subprocess.Popen([STUB, "0"], stdout=subprocess.PIPE, text=True)
    first = stub.stdout.readline().split()
    check(first[0] == "listening", "the Anthropic API stub listens")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), ANTHROPIC_BASE_URL=first[1])
    log = WORK / "gateway-auth.log"
    editor = Editor()
    try:
        with open(log, "w") as stderr:
            async with acp.spawn_agent_process(editor, GATEWAY, "acp", "--config", CONFIG, cwd=str(WORK), env=env,
                                               transport_kwargs={"stderr": stderr.fileno()}) as (conn, proc):
                caps = schema.ClientCapabilities(auth=schema.AuthCapabilities(terminal=True))
                init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=caps,
                                             client_info=schema.Implementation(name="auth-editor", version="1"))
                methods = [getattr(m, "root", m) for m in init.auth_methods]
                by_id = {m.id: m for m in methods}
                check(set(by_id) == {"gateway", "gateway-login"}, f"two auth methods are offered: {sorted(by_id)}")
                check(isinstance(by_id["gateway"], schema.AuthMethodAgent), "'gateway' is agent auth")
                login = by_id["gateway-login"]
                check(getattr(login, "type", None) == "terminal" and login.args == ["login"],
                      "'gateway-login' is terminal auth running `gateway login`")
                check(init.agent_capabilities.auth.logout is not None, "logout is advertised")

                await refused(conn.new_session(cwd=str(ws), mcp_servers=[]), "session/new before a sign-in")
                await refused(conn.authenticate(method_id="gateway"), "authenticate before a sign-in")

                # The editor runs the terminal method: this binary with its args, the key typed in.
                done = subprocess.run([GATEWAY, *login.args], input=KEY + "\n", env=env, capture_output=True,
                                      text=True, timeout=30)
                check(done.returncode == 0, f"`gateway login` succeeds ({done.stderr.strip()})")
                check(KEY not in done.stdout + done.stderr, "`gateway login` never prints the key")
                stored = home / ".config/gateway/credentials.toml"
                check(stat.S_IMODE(stored.stat().st_mode) == 0o600, "the stored key is readable by the user alone")

                answer = await conn.authenticate(method_id="gateway")
                check(isinstance(answer, schema.AuthenticateResponse), "authenticate succeeds after the sign-in")
                sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
                # The editor's model choice reaches the model API (the stub lists the models asked for).
                await conn.set_config_option(config_id="model", session_id=sid, value="claude-opus-4-5")
                r = await conn.prompt(session_id=sid, prompt=[text("hello after login")])
                said = "".join(u.content.text for u in editor.updates
                               if getattr(u, "session_update", "") == "agent_message_chunk")
                check(r.stop_reason == "end_turn" and said == "echo: hello after login",
                      f"a native prompt runs on the model with the stored key ({r.stop_reason}, {said!r})")

                # This SDK release has no logout call: the request as the schema defines it.
                answer = await conn._conn.send_request("logout", {})
                check(schema.LogoutResponse.model_validate(answer) is not None and not stored.exists(),
                      "logout answers a LogoutResponse and forgets the stored key")
                await refused(conn.prompt(session_id=sid, prompt=[text("after logout")]), "a prompt after logout")
    finally:
        stub.terminate()
        out, _ = stub.communicate(timeout=10)
    keys = [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("x-api-key ")]
    check(keys == [KEY], f"the model API saw the signed-in key and no other ({len(keys)} keys)")
    models = [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("model ")]
    check(models == ["claude-opus-4-5"], f"the model the editor chose is the one the model API was asked for ({models})")
    check(KEY not in log.read_text(), "the key is not in the gateway's log")

    await setup_checks()

    manifest = json.loads((MANIFEST / "agent.json").read_text())
    version = subprocess.run([GATEWAY, "--version"], capture_output=True, text=True).stdout.split()[-1]
    check(manifest["version"] == version, f"the manifest names this build's version ({manifest['version']}, {version})")
    check(manifest["distribution"]["uvx"]["args"] == ["acp"], "the manifest runs `acp`")

    if REGISTRY:
        client = load(REGISTRY / "client.py")
        result = client.run_auth_check([GATEWAY, "acp", "--config", CONFIG], cwd=WORK, env={"ANTHROPIC_BASE_URL": first[1]},
                                       timeout=60.0)
        check(result.success, f"the ACP registry's auth check passes ({result.error}; "
                              f"{[(m.id, m.type) for m in result.auth_methods]})")
        build = load(REGISTRY / "build_registry.py")
        check(build.HAS_JSONSCHEMA, "the registry's validator has jsonschema")
        schema_doc = json.loads((REGISTRY / "agent.schema.json").read_text())
        errors = build.validate_agent(manifest, manifest["id"], schema_doc)
        errors += build.validate_distribution_versions(manifest["version"], manifest["distribution"])
        errors += build.validate_icon(MANIFEST / "icon.svg")
        check(errors == [], f"the registry's validator accepts compat/acp-registry ({errors})")


async def setup_checks():
    """ADR 0029: one place for a configuration's state, and a gateway that cannot start tells
    the editor why instead of closing the connection."""
    # A config file without data settings, the editor starting `gateway acp` from `/`: the
    # state is beside the file, where `gateway sessions` with the same file finds it.
    cfg_dir = WORK / "setup"
    cfg_dir.mkdir(exist_ok=True)
    cfg = cfg_dir / "gateway.toml"
    cfg.write_text('default_agent = "main"\n[agents.main]\nbackend = "native"\n')
    ws = WORK / "ws-setup"
    ws.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    async with acp.spawn_agent_process(Editor(), GATEWAY, "acp", "--config", str(cfg), cwd="/", env=env,
                                       transport_kwargs={"stderr": subprocess.DEVNULL}) as (conn, proc):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
    check((cfg_dir / "data/gateway.db").exists() and (cfg_dir / "data/secret.key").exists(),
          "gateway acp keeps a config file's state beside it, whatever its working directory")
    listed = subprocess.run([GATEWAY, "sessions", "--config", str(cfg), "list"], env=env, cwd=str(WORK),
                            capture_output=True, text=True, timeout=30)
    check(sid in listed.stdout, f"gateway sessions with the same file lists the editor's session ({listed.stderr.strip()})")

    # Gateways that cannot start: each still answers initialize, and every request says why.
    broken = cfg_dir / "broken.toml"
    cases = [
        ('model = "anthropic"\nsandbox = "local"\n', "not a security boundary"),
        ('no_such_setting = 1\n', "no_such_setting"),
    ]
    for text, why in cases:
        broken.write_text(f'data_dir = "{cfg_dir}/broken"\n' + text)
        async with acp.spawn_agent_process(Editor(), GATEWAY, "acp", "--config", str(broken), cwd=str(WORK),
                                           env=dict(env, ANTHROPIC_API_KEY="k"),
                                           transport_kwargs={"stderr": subprocess.DEVNULL}) as (conn, proc):
            init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            try:
                await conn.new_session(cwd=str(ws), mcp_servers=[])
                check(False, "a gateway that cannot start refuses sessions")
            except acp.RequestError as e:
                check(init.protocol_version == 1 and why in str(e) and (e.data or {}).get("reason") == "startup_failed",
                      f"a gateway that cannot start tells the editor why ({why}): {e}")


def load(path):
    """A module of the registry's CI, by file (they are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run(main, 120)
