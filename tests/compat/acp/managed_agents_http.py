"""A Managed Agents client (raw HTTP + SSE, stdlib only) drives an `acp:` agent end to end on
`gateway serve`: send, stream, approve the agent's permission request, idle.

Usage: managed_agents_http.py BASE_URL DATA_DIR

The agent `tsagent` (agent_ts.mjs) asks permission before writing approved.txt; the client sees
`agent.tool_use` with `evaluated_permission: ask` and `session.status_idle` with
`requires_action`, answers `user.tool_confirmation`, and the turn finishes with `end_turn`,
the file in the session's workspace.
"""

import http.client
import json
import sys
import urllib.parse
from pathlib import Path
from tap import check, run

BASE, DATA = sys.argv[1], Path(sys.argv[2])
URL = urllib.parse.urlparse(BASE)
HEADERS = {"content-type": "application/json", "anthropic-beta": "managed-agents-2026-04-01"}


def call(method, path, body=None):
    c = http.client.HTTPConnection(URL.hostname, URL.port, timeout=30)
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=HEADERS)
    r = c.getresponse()
    data = r.read()
    if r.status != 200:
        raise AssertionError(f"{method} {path} -> {r.status}: {data[:500]!r}")
    return json.loads(data)


class Stream:
    def __init__(self, session_id):
        self.c = http.client.HTTPConnection(URL.hostname, URL.port, timeout=60)
        self.c.request("GET", f"/v1/sessions/{session_id}/events/stream", headers={**HEADERS, "accept": "text/event-stream"})
        self.r = self.c.getresponse()
        assert self.r.status == 200, self.r.status

    def next(self):
        data = []
        while True:
            line = self.r.readline()
            if not line:
                raise AssertionError("the stream ended")
            line = line.decode().rstrip("\r\n")
            if line.startswith("data:"):
                data.append(line[5:].strip())
            elif line == "" and data:
                return json.loads("\n".join(data))

    def until_idle(self):
        events = []
        while True:
            e = self.next()
            events.append(e)
            if e["type"] == "session.status_idle":
                return events


def main():
    agents = call("GET", "/v1/agents?limit=100")["data"]
    agent = next(a for a in agents if a["name"] == "tsagent")
    check(agent["backend"] == "acp:tsagent", "the config-published agent runs on acp:tsagent")
    env = call("POST", "/v1/environments", {
        "name": "acp-eager",
        "config": {"type": "cloud", "networking": {"type": "unrestricted"}, "sandbox_provisioning": "eager"},
    })
    session = call("POST", "/v1/sessions", {"agent": agent["id"], "environment_id": env["id"]})
    sid = session["id"]
    stream = Stream(sid)
    call("POST", f"/v1/sessions/{sid}/events", {"events": [{"type": "user.message", "content": [{"type": "text", "text": "permission"}]}]})
    events = stream.until_idle()
    types = [e["type"] for e in events]
    check("session.status_running" in types, f"the turn started ({types})")
    uses = [e for e in events if e["type"] == "agent.tool_use"]
    check(len(uses) == 1 and uses[0]["evaluated_permission"] == "ask", "the agent's permission request is an agent.tool_use asking")
    check(uses[0]["name"] == "Write approved.txt", "the tool use carries the agent's title")
    idle = events[-1]
    check(idle["stop_reason"]["type"] == "requires_action" and idle["stop_reason"]["event_ids"] == [uses[0]["id"]], "idle with requires_action names it")
    check(not (DATA / "workspaces" / sid / "approved.txt").exists(), "nothing happened before the approval")

    call("POST", f"/v1/sessions/{sid}/events", {"events": [{"type": "user.tool_confirmation", "tool_use_id": uses[0]["id"], "result": "allow"}]})
    events = stream.until_idle()
    types = [e["type"] for e in events]
    check(events[-1]["stop_reason"]["type"] == "end_turn", f"the turn finished with end_turn ({types})")
    results = [e for e in events if e["type"] == "agent.tool_result"]
    check(len(results) == 1 and results[0]["tool_use_id"] == uses[0]["id"], "the agent's tool result answers the same tool use")
    texts = "".join(b.get("text", "") for e in events if e["type"] == "agent.message" for b in e["content"])
    check(texts == "permission: allowed", f"the agent's reply arrived ({texts!r})")
    check((DATA / "workspaces" / sid / "approved.txt").read_text() == "approved", "the agent wrote the file in the session's workspace")

    call("POST", f"/v1/sessions/{sid}/events", {"events": [{"type": "user.message", "content": [{"type": "text", "text": "bye"}]}]})
    events = stream.until_idle()
    texts = "".join(b.get("text", "") for e in events if e["type"] == "agent.message" for b in e["content"])
    check(events[-1]["stop_reason"]["type"] == "end_turn" and texts == "agent says: bye", "a second turn reuses the agent process")


if __name__ == "__main__":
    run(main, None)
