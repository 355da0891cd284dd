"""The raw SSE stream: framing (reference §6) and reconnecting with Last-Event-ID / after_id
(ADR 0007 §7): no gap, no duplicate."""

from __future__ import annotations

import re
from typing import Iterator

import httpx2
import pytest

from conftest import gateway_url, run_turn, user_message
from helpers import check_error_response, check_event, check_sse_frame, parse_sse, raw_page, request_id, text_of

HEADERS = {"authorization": "Bearer test-key", "anthropic-beta": "managed-agents-2026-04-01",
           "accept": "application/json"}  # what the SDK sends on the stream request too
WRITE = 'tool:write {"file_path": "notes.txt", "content": "hello"}'
# Slow enough that the reconnect lands mid-turn: replay first, then live frames.
SLOW_BASH = 'tool:bash {"command": "sleep 1 && echo slow-done"}'
FRAME_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


class RawStream:
    """A raw SSE connection; `next_event()` returns the next validated frame's data."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self.http = httpx2.Client(timeout=httpx2.Timeout(10, connect=5))
        self.cm = self.http.stream("GET", url, headers={**HEADERS, **(headers or {})})
        self.response = self.cm.__enter__()
        request_id(self.response.headers)
        assert self.response.status_code == 200, self.response.read()
        ctype = self.response.headers.get("content-type", "")
        assert ctype.startswith("text/event-stream"), ctype
        self.chunks: Iterator[bytes] = self.response.iter_raw()
        self.buffer = b""
        self.comments: list[str] = []
        self.count = 0

    def next_event(self) -> dict:
        while True:
            m = FRAME_END.search(self.buffer)
            if m:
                block, self.buffer = self.buffer[: m.end()], self.buffer[m.end():]
                frames, comments = parse_sse(block)
                self.comments.extend(comments)
                if frames:
                    assert len(frames) == 1
                    self.count += 1
                    return check_sse_frame(frames[0], f"raw frame {self.count}")
                continue
            try:
                self.buffer += next(self.chunks)
            except StopIteration:
                raise AssertionError(f"the stream ended; unparsed tail {self.buffer[:200]!r}") from None

    def until_idle(self, limit: int = 100) -> list[dict]:
        out = []
        while True:
            e = self.next_event()
            out.append(e)
            if e["type"] == "session.status_idle" and e["stop_reason"]["type"] != "requires_action":
                return out
            assert len(out) < limit

    def close(self) -> None:
        self.cm.__exit__(None, None, None)
        self.http.close()


def stream_url(session_id: str, alias: bool = False) -> str:
    return f"{gateway_url()}/v1/sessions/{session_id}/{'stream' if alias else 'events/stream'}"


def listed(client, session_id: str) -> list[dict]:
    body = raw_page(client.beta.sessions.events.with_raw_response.list(session_id, limit=1000), "event")
    assert body["next_page"] is None
    return body["data"]


def same_event(frame: dict, item: dict) -> None:
    """A stream frame is the list item (user.* processed_at may be filled in later)."""
    if frame["type"].startswith("user."):
        frame, item = ({k: v for k, v in d.items() if k != "processed_at"} for d in (frame, item))
    assert frame == item


@pytest.mark.parametrize("command", [WRITE, SLOW_BASH], ids=["write", "slow-bash"])
def test_raw_frames_and_reconnect_with_last_event_id(client, make_session, command):
    s = make_session()
    first = RawStream(stream_url(s.id))
    client.beta.sessions.events.send(s.id, events=[user_message(command)])
    head = [first.next_event() for _ in range(3)]
    first.close()  # dropped mid-turn

    second = RawStream(stream_url(s.id), {"Last-Event-ID": head[-1]["id"]})
    tail = second.until_idle()
    second.close()

    union = head + tail
    ids = [e["id"] for e in union]
    assert len(ids) == len(set(ids)), "a replayed event came twice"
    history = listed(client, s.id)
    assert ids == [e["id"] for e in history], "stream before + after the reconnect = the whole log"
    for frame, item in zip(union, history):
        same_event(frame, item)
    # ADR 0007 §8, for a turn with one tool call (thread status events, if any, left aside).
    kinds = [e["type"] for e in union if not e["type"].startswith("session.thread_")]
    assert kinds == [
        "user.message", "session.status_running",
        "span.model_request_start", "agent.tool_use", "span.model_request_end", "agent.tool_result",
        "span.model_request_start", "agent.message", "span.model_request_end",
        "session.usage", "session.status_idle"], kinds
    use = next(e for e in union if e["type"] == "agent.tool_use")
    result = next(e for e in union if e["type"] == "agent.tool_result")
    assert result["tool_use_id"] == use["id"] and not result.get("is_error")
    reply = text_of([e for e in union if e["type"] == "agent.message"][-1])
    if command == WRITE:
        assert use["name"] == "write" and use["input"] == {"file_path": "notes.txt", "content": "hello"}
        assert reply.startswith("done: ")
    else:
        assert use["name"] == "bash" and "slow-done" in text_of(result)
        assert reply.startswith("done: ") and "slow-done" in reply


def test_replay_with_after_id_on_the_alias_then_live(client, make_session):
    s = make_session()
    run_turn(client, s.id, WRITE)
    history = listed(client, s.id)
    assert len(history) >= 8
    cut = 3
    replay = RawStream(stream_url(s.id, alias=True) + f"?after_id={history[cut]['id']}")
    got = replay.until_idle()
    assert [e["id"] for e in got] == [e["id"] for e in history[cut + 1:]]
    for frame, item in zip(got, history[cut + 1:]):
        same_event(frame, item)
    # Caught up: the same connection is now live and sees the next turn, nothing twice.
    client.beta.sessions.events.send(s.id, events=[user_message("live again")])
    live = replay.until_idle()
    replay.close()
    assert live[0]["type"] == "user.message" and text_of(live[0]) == "live again"
    assert [text_of(e) for e in live if e["type"] == "agent.message"] == ["echo: live again"]
    assert not {e["id"] for e in live} & {e["id"] for e in got}
    for e in live:
        check_event(e)


def test_last_event_id_of_the_last_event_replays_nothing(client, make_session):
    s = make_session()
    run_turn(client, s.id, "one")
    last = listed(client, s.id)[-1]
    assert last["type"] == "session.status_idle"
    stream = RawStream(stream_url(s.id), {"Last-Event-ID": last["id"]})
    client.beta.sessions.events.send(s.id, events=[user_message("two")])
    got = stream.until_idle()
    stream.close()
    assert got[0]["type"] == "user.message" and text_of(got[0]) == "two"
    assert [e["id"] for e in got] == [e["id"] for e in listed(client, s.id)][-len(got):]


def test_stream_of_unknown_session_is_404():
    r = httpx2.get(stream_url("sesn_0000000000000000000000"), headers=HEADERS, timeout=10)
    check_error_response(r, 404, "not_found_error", "session_not_found")


def test_parse_sse_accepts_keep_alive_comments():
    # The helper itself: comments are not frames, and a frame needs its blank line.
    frames, comments = parse_sse(b": keep-alive\n\nevent: x\ndata: {}\n\nevent: y\n")
    assert comments == [": keep-alive"] and len(frames) == 1
