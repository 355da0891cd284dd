"""The outbound backend `a2a:<remote>`: Managed Agents sessions (raw HTTP to `gateway serve`)
on agents whose turns run on real remote A2A agents (a2a-sdk 1.3.0 streaming and polling,
a2a-sdk 0.3.26 native v0.3)."""

import json
import signal
import time

import httpx
import pytest

REMOTES = ["peer1", "peer1poll", "peer03"]


def api(gw):
    return httpx.Client(base_url=gw.url, timeout=30)


def agent_id(gw, name: str) -> str:
    agents = api(gw).get("/v1/agents", params={"limit": 100}).json()["data"]
    return next(a["id"] for a in agents if a["name"] == name)


def environment(gw, eager: bool = False) -> str:
    config = {"type": "cloud", "networking": {"type": "unrestricted"}}
    if eager:
        config["sandbox_provisioning"] = "eager"
    r = api(gw).post("/v1/environments", json={"name": f"env-{time.time()}", "config": config})
    assert r.status_code == 200, r.text
    return r.json()["id"]


def session(gw, remote: str) -> str:
    r = api(gw).post("/v1/sessions", json={"agent": agent_id(gw, remote), "environment_id": environment(gw)})
    assert r.status_code == 200, r.text
    return r.json()["id"]


def send(gw, sid: str, *events: dict) -> None:
    r = api(gw).post(f"/v1/sessions/{sid}/events", json={"events": list(events)})
    assert r.status_code == 200, r.text


def user(text: str) -> dict:
    return {"type": "user.message", "content": [{"type": "text", "text": text}]}


def events(gw, sid: str) -> list[dict]:
    return api(gw).get(f"/v1/sessions/{sid}/events", params={"limit": 1000}).json()["data"]


def texts(evs: list[dict]) -> list[str]:
    return [b["text"] for e in evs if e["type"] == "agent.message" for b in e["content"] if b["type"] == "text"]


def wait(gw, sid: str, pred, secs: float = 30) -> list[dict]:
    deadline = time.time() + secs
    while time.time() < deadline:
        try:
            evs = events(gw, sid)
            if pred(evs):
                return evs
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out; events: {json.dumps(events(gw, sid))[-3000:]}\nlog: {gw.log_text()[-3000:]}")


def idle_count(evs: list[dict]) -> int:
    return sum(1 for e in evs if e["type"] == "session.status_idle")


@pytest.mark.parametrize("remote", REMOTES)
def test_a_streamed_turn_completes_on_the_remote(gw, peers, remote):
    sid = session(gw, remote)
    before = peers[remote].counts()["messages"]
    seen = []
    with httpx.stream("GET", f"{gw.url}/v1/sessions/{sid}/events/stream", timeout=30) as stream:
        send(gw, sid, user("hello remote"))
        for line in stream.iter_lines():
            if line.startswith("data:"):
                e = json.loads(line[5:])
                seen.append(e)
                if e["type"] == "session.status_idle":
                    break
    assert texts(seen) == ["echo: hello remote"], seen
    assert seen[-1]["stop_reason"]["type"] == "end_turn"
    assert peers[remote].counts()["messages"] == before + 1


@pytest.mark.parametrize("remote,sig", [("peer1", signal.SIGKILL), ("peer03", signal.SIGTERM), ("peer1poll", signal.SIGKILL)])
def test_a_restart_mid_task_resumes_without_resending(gw, peers, remote, sig):
    sid = session(gw, remote)
    marker = f"slow 4 {remote}-{sig}"
    send(gw, sid, user(marker))
    wait(gw, sid, lambda evs: any(t.startswith("tick") for t in texts(evs)))
    gw.stop(sig)
    gw.start()
    evs = wait(gw, sid, lambda evs: idle_count(evs) >= 1, secs=60)
    got = texts(evs)
    assert got[-1] == "done", got
    ticks = [t for t in got if t.startswith("tick")]
    assert len(ticks) == len(set(ticks)) == 8, f"each remote artifact committed once: {got}"
    assert peers[remote].counts()["texts"].count(marker) == 1, "the message was not sent again"
    assert evs[-1]["stop_reason"]["type"] == "end_turn"


@pytest.mark.parametrize("remote", REMOTES)
def test_an_interrupt_cancels_the_remote_task(gw, peers, remote):
    sid = session(gw, remote)
    before = peers[remote].counts()["cancels"]
    send(gw, sid, user("slow 20"))
    wait(gw, sid, lambda evs: any(t.startswith("tick") for t in texts(evs)))
    send(gw, sid, {"type": "user.interrupt"})
    wait(gw, sid, lambda evs: idle_count(evs) >= 1)
    deadline = time.time() + 10
    while peers[remote].counts()["cancels"] == before and time.time() < deadline:
        time.sleep(0.1)
    assert peers[remote].counts()["cancels"] == before + 1


@pytest.mark.parametrize("remote", REMOTES)
def test_remote_input_required_is_answered_through_the_client(gw, peers, remote):
    sid = session(gw, remote)
    send(gw, sid, user("ask"))
    evs = wait(gw, sid, lambda evs: idle_count(evs) >= 1)
    assert evs[-1]["stop_reason"]["type"] == "requires_action"
    ask = next(e for e in evs if e["type"] == "agent.custom_tool_use")
    assert ask["name"] == "a2a_input_required" and ask["input"]["prompt"] == "what is your name?"
    send(gw, sid, {"type": "user.custom_tool_result", "custom_tool_use_id": ask["id"],
                   "content": [{"type": "text", "text": "Ada"}]})
    evs = wait(gw, sid, lambda evs: idle_count(evs) >= 2)
    assert texts(evs)[-1] == "hello Ada"
    assert evs[-1]["stop_reason"]["type"] == "end_turn"


def test_sessions_needing_local_inputs_are_refused(gw):
    agent = agent_id(gw, "peer1")
    r = api(gw).post("/v1/sessions", json={"agent": agent, "environment_id": environment(gw, eager=True)})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["details"]["error_code"] == "a2a_with_eager_provisioning"
    r = api(gw).post("/v1/sessions", json={
        "agent": agent, "environment_id": environment(gw),
        "resources": [{"type": "file", "file_id": "file_x", "mount_path": "/x"}]})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["details"]["error_code"] == "a2a_with_local_inputs", r.text
    assert "A2A + local inputs" in r.json()["error"]["message"], r.text


def test_remote_cards_are_pinned_at_start_and_credentials_stay_out_of_logs(peers):
    from conftest import Gateway
    g = Gateway({name: p.url for name, p in peers.items()})
    try:
        deadline = time.time() + 15
        pinned = set()
        while time.time() < deadline and pinned != set(REMOTES):
            for line in g.log_text().splitlines():
                entry = json.loads(line)
                if entry.get("message") == "remote agent card fetched and pinned":
                    pinned.add(entry["remote"])
            time.sleep(0.1)
        assert pinned == set(REMOTES), f"pinned before any session: {pinned}\n{g.log_text()[-3000:]}"
        # A turn still works on the pinned card, and the remote's credentials never reach the log.
        sid = session(g, "peer1")
        send(g, sid, user("pinned"))
        assert texts(wait(g, sid, lambda evs: idle_count(evs) >= 1))[-1] == "echo: pinned"
    finally:
        g.stop()
    assert "peer-secret" not in g.log_text()
