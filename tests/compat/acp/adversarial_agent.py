"""An adversarial ACP agent speaking raw JSON (no SDK), run by the gateway as an `acp:` backend.

It prints a non-JSON banner on stdout first (the gateway must skip it), then acts on the
prompt's first word:
  unknown-kind  an update of an unknown kind and a `plan`, then text, then end_turn
  unknown-stop  text, then the stop reason "paused_forever" (not in ACP v1)
  crash         text, then exits with status 3 in the middle of the turn
  silent        never answers the prompt (the gateway's turn deadline must end it)
  anything      echo, end_turn
"""

import json
import sys

out = sys.stdout


def send(msg):
    out.write(json.dumps(msg) + "\n")
    out.flush()


def update(session_id, upd):
    send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": upd}})


def text(session_id, t):
    update(session_id, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": t}})


out.write("adversarial agent booting (this line is not JSON)\n")
out.flush()

for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    method, mid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": "adv-1"}})
    elif method == "session/prompt":
        sid = params.get("sessionId")
        words = " ".join(b.get("text", "") for b in params.get("prompt", []) if b.get("type") == "text").split()
        word = words[0] if words else ""
        if word == "unknown-kind":
            update(sid, {"sessionUpdate": "_future_kind", "payload": {"x": 1}})
            update(sid, {"sessionUpdate": "plan", "entries": [{"content": "a", "priority": "high", "status": "pending"}]})
            text(sid, "after unknown kinds")
            send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
        elif word == "unknown-stop":
            text(sid, "before an unknown stop reason")
            send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "paused_forever"}})
        elif word == "crash":
            text(sid, "about to crash")
            sys.exit(3)
        elif word == "silent":
            pass
        else:
            text(sid, "adversary: " + " ".join(words))
            send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
    elif mid is not None and method is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "method not found"}})
