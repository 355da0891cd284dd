"""The gateway as an A2A server, driven by the a2a-sdk 1.3.0 client in v1.0 and v0.3 modes
over JSON-RPC and HTTP+JSON."""

import asyncio
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError
from a2a.helpers import new_text_part
from a2a.types import (
    AgentCard, AuthenticationInfo, CancelTaskRequest, GetTaskPushNotificationConfigRequest, GetTaskRequest,
    ListTasksRequest, Message, Role,
    SendMessageConfiguration, SendMessageRequest, SubscribeToTaskRequest, TaskPushNotificationConfig, TaskState,
)
from a2a.utils.errors import TaskNotCancelableError
from google.protobuf.json_format import MessageToDict, ParseDict

from conftest import free_port

MODES = [("1.0", "JSONRPC"), ("1.0", "HTTP+JSON"), ("0.3", "JSONRPC"), ("0.3", "HTTP+JSON")]
ids = [f"{v}-{b}" for v, b in MODES]


def client(gw, agent: str, mode, streaming: bool, polling: bool = False):
    version, binding = mode
    raw = httpx.get(f"{gw.url}/a2a/{agent}/.well-known/agent-card.json").json()
    card = ParseDict(raw, AgentCard(), ignore_unknown_fields=True)
    chosen = [i for i in card.supported_interfaces if i.protocol_version == version and i.protocol_binding == binding]
    assert len(chosen) == 1, raw["supportedInterfaces"]
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(chosen)
    config = ClientConfig(streaming=streaming, polling=polling, supported_protocol_bindings=[binding],
                          httpx_client=httpx.AsyncClient(timeout=30))
    return ClientFactory(config).create(card)


def message(text: str, message_id: str | None = None, task_id: str = "", context_id: str = "") -> Message:
    return Message(message_id=message_id or str(uuid.uuid4()), role=Role.ROLE_USER, parts=[new_text_part(text)],
                   task_id=task_id, context_id=context_id)


async def collect(it):
    return [e async for e in it]


def texts(task) -> list[str]:
    return [p.text for a in task.artifacts for p in a.parts if p.text]


@pytest.mark.parametrize("mode", MODES, ids=ids)
async def test_blocking_send_returns_the_completed_task(gw, mode):
    c = client(gw, "echo", mode, streaming=False)
    events = await collect(c.send_message(SendMessageRequest(message=message("hello"))))
    assert len(events) == 1 and events[0].HasField("task")
    task = events[0].task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert texts(task) == ["echo: hello"]
    assert task.history[0].parts[0].text == "hello"


@pytest.mark.parametrize("mode", MODES, ids=ids)
async def test_non_blocking_send_then_get(gw, mode):
    c = client(gw, "conformance", mode, streaming=False, polling=True)
    events = await collect(c.send_message(SendMessageRequest(message=message("x", f"tck-stream-003-{uuid.uuid4()}"))))
    task = events[0].task
    assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    for _ in range(100):
        got = await c.get_task(GetTaskRequest(id=task.id))
        if got.status.state == TaskState.TASK_STATE_COMPLETED:
            break
        await asyncio.sleep(0.1)
    assert got.status.state == TaskState.TASK_STATE_COMPLETED
    assert texts(got) == ["Stream task lifecycle"]
    assert got.context_id == task.context_id


@pytest.mark.parametrize("mode", MODES, ids=ids)
async def test_stream_starts_with_the_task_and_ends_completed(gw, mode):
    c = client(gw, "conformance", mode, streaming=True)
    events = await collect(c.send_message(SendMessageRequest(message=message("x", f"tck-stream-001-{uuid.uuid4()}"))))
    assert events[0].HasField("task"), events[0]
    kinds = [e.WhichOneof("payload") for e in events]
    assert "artifact_update" in kinds, kinds
    art = [e.artifact_update for e in events if e.HasField("artifact_update")][0]
    assert art.artifact.parts[0].text == "Stream hello from TCK"
    last = events[-1]
    assert last.HasField("status_update") and last.status_update.status.state == TaskState.TASK_STATE_COMPLETED


@pytest.mark.parametrize("mode", MODES[:2], ids=ids[:2])
async def test_list_tasks_of_a_context(gw, mode):
    c = client(gw, "echo", mode, streaming=False)
    first = (await collect(c.send_message(SendMessageRequest(message=message("one")))))[0].task
    second = (await collect(c.send_message(SendMessageRequest(message=message("two", context_id=first.context_id)))))[0].task
    assert second.context_id == first.context_id
    for _ in range(50):
        page = await c.list_tasks(ListTasksRequest(context_id=first.context_id))
        if len(page.tasks) == 2:
            break
        await asyncio.sleep(0.1)
    assert {t.id for t in page.tasks} == {first.id, second.id}
    assert page.total_size == 2 and page.next_page_token == ""


def cancel_on_the_wire(gw, agent: str, mode, task_id: str) -> httpx.Response:
    """CancelTask as raw HTTP in the mode's version and binding."""
    version, binding = mode
    base = f"{gw.url}/a2a/{agent}"
    if binding == "JSONRPC":
        method = "CancelTask" if version == "1.0" else "tasks/cancel"
        headers = {"A2A-Version": "1.0"} if version == "1.0" else {}
        return httpx.post(base, headers=headers, timeout=30,
                          json={"jsonrpc": "2.0", "id": 1, "method": method, "params": {"id": task_id}})
    if version == "1.0":
        return httpx.post(f"{base}/tasks/{task_id}:cancel", headers={"A2A-Version": "1.0"}, json={}, timeout=30)
    return httpx.post(f"{base}/v1/tasks/{task_id}:cancel", json={}, timeout=30)


@pytest.mark.parametrize("mode", MODES, ids=ids)
async def test_cancel_an_open_task(gw, mode):
    c = client(gw, "conformance", mode, streaming=False)
    task = (await collect(c.send_message(SendMessageRequest(message=message("x", f"tck-input-required-{uuid.uuid4()}")))))[0].task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    canceled = await c.cancel_task(CancelTaskRequest(id=task.id))
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    # Canceling it again is TaskNotCancelable: the SDK maps it to its error class (its v0.3
    # REST transport knows only a2a-sdk's own `type` field, so it reports the HTTP status) ...
    version, binding = mode
    if (version, binding) == ("0.3", "HTTP+JSON"):
        with pytest.raises(A2AClientError, match="HTTP Error 409"):
            await c.cancel_task(CancelTaskRequest(id=task.id))
    else:
        with pytest.raises(TaskNotCancelableError):
            await c.cancel_task(CancelTaskRequest(id=task.id))
    # ... and on the wire it is -32002 over JSON-RPC, HTTP 400 over v1.0 REST (wire reference
    # §5), 409 over v0.3 REST (what a2a-sdk 0.3's server answers).
    r = cancel_on_the_wire(gw, "conformance", mode, task.id)
    if binding == "JSONRPC":
        assert r.status_code == 200, r.text
        assert r.json()["error"]["code"] == -32002, r.text
        if version == "1.0":
            assert r.json()["error"]["data"][0]["reason"] == "TASK_NOT_CANCELABLE", r.text
    else:
        assert r.status_code == (400 if version == "1.0" else 409), r.text
        if version == "1.0":
            assert r.json()["error"]["status"] == "FAILED_PRECONDITION", r.text
            assert r.json()["error"]["details"][0]["reason"] == "TASK_NOT_CANCELABLE", r.text
        else:
            assert r.json()["code"] == -32002, r.text


@pytest.mark.parametrize("mode", MODES, ids=ids)
async def test_a_new_message_after_a_cancel_is_what_is_answered(gw, mode):
    c = client(gw, "echo", mode, streaming=False)
    # Config-published agents ask before bash: the task waits for input, then is canceled.
    task = (await collect(c.send_message(SendMessageRequest(message=message('tool:bash {"command": "sleep 30"}')))))[0].task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert (await c.cancel_task(CancelTaskRequest(id=task.id))).status.state == TaskState.TASK_STATE_CANCELED
    after = (await collect(c.send_message(SendMessageRequest(message=message("after the cancel", context_id=task.context_id)))))[0].task
    assert after.context_id == task.context_id and after.id != task.id
    assert after.status.state == TaskState.TASK_STATE_COMPLETED
    assert texts(after) == ["echo: after the cancel"]


@pytest.mark.parametrize("mode", MODES, ids=ids)
async def test_two_subscribers_see_identical_events(gw, mode):
    c = client(gw, "conformance", mode, streaming=False, polling=True)
    task = (await collect(c.send_message(SendMessageRequest(message=message("x", f"test-resubscribe-message-id-{uuid.uuid4()}")))))[0].task
    s1 = client(gw, "conformance", mode, streaming=True)
    s2 = client(gw, "conformance", mode, streaming=True)
    a, b = await asyncio.gather(
        collect(s1.subscribe(SubscribeToTaskRequest(id=task.id))),
        collect(s2.subscribe(SubscribeToTaskRequest(id=task.id))),
    )
    assert a[0].HasField("task") and b[0].HasField("task")
    strip = lambda evs: [MessageToDict(e) for e in evs[1:]]  # noqa: E731
    assert strip(a) == strip(b)
    assert a[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


class Receiver:
    def __init__(self):
        self.got = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                outer.got.append((dict(self.headers), json.loads(body)))
                ok = self.headers.get("authorization") == "Bearer push-secret"
                self.send_response(200 if ok else 401)
                self.end_headers()

            def log_message(self, *a):
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.mark.parametrize("mode", MODES, ids=ids)
async def test_push_notifications_reach_a_receiver_with_credentials(gw, mode):
    r = Receiver()
    c = client(gw, "conformance", mode, streaming=False)
    push = TaskPushNotificationConfig(url=f"http://127.0.0.1:{r.port}/hook", token="tok",
                                      authentication=AuthenticationInfo(scheme="Bearer", credentials="push-secret"))
    req = SendMessageRequest(message=message("x", f"tck-stream-001-{uuid.uuid4()}"),
                             configuration=SendMessageConfiguration(task_push_notification_config=push))
    task = (await collect(c.send_message(req)))[0].task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED

    def done(body):
        return "completed" in json.dumps(body).lower()

    for _ in range(100):
        if any(done(b) for _, b in r.got):
            break
        await asyncio.sleep(0.1)
    r.server.shutdown()
    assert r.got, "no push delivery arrived"
    assert any(done(b) for _, b in r.got), r.got
    for headers, body in r.got:
        lower = {k.lower(): v for k, v in headers.items()}
        assert lower["authorization"] == "Bearer push-secret"
        assert lower["x-a2a-notification-token"] == "tok"
        assert task.id in json.dumps(body)


@pytest.mark.parametrize("mode", MODES, ids=ids)
async def test_input_required_round_trip(gw, mode):
    c = client(gw, "conformance", mode, streaming=False)
    task = (await collect(c.send_message(SendMessageRequest(message=message("x", f"tck-input-required-{uuid.uuid4()}")))))[0].task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert "Please provide input" in task.status.message.parts[0].text
    follow = message("Ada", task_id=task.id, context_id=task.context_id)
    done = (await collect(c.send_message(SendMessageRequest(message=follow))))[0].task
    assert done.id == task.id
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert done.status.message.parts[0].text == "Input received: Ada"


@pytest.mark.parametrize("mode", MODES, ids=ids)
async def test_a_push_config_created_by_the_client_is_read_back(gw, mode):
    # Over v0.3 REST the client sends `{parent, configId, config: {name,
    # pushNotificationConfig}}` (the v0.3 proto's CreateTaskPushNotificationConfigRequest).
    c = client(gw, "conformance", mode, streaming=False)
    task = (await collect(c.send_message(SendMessageRequest(message=message("x", f"tck-input-required-{uuid.uuid4()}")))))[0].task
    cfg = TaskPushNotificationConfig(task_id=task.id, id="c1", url="https://example.com/hook", token="tok")
    created = await c.create_task_push_notification_config(cfg)
    assert created.url == "https://example.com/hook"
    got = await c.get_task_push_notification_config(GetTaskPushNotificationConfigRequest(task_id=task.id, id=created.id))
    assert got.url == "https://example.com/hook"
    assert got.token == "tok"
    await c.cancel_task(CancelTaskRequest(id=task.id))


@pytest.mark.parametrize("mode", MODES, ids=ids)
async def test_an_mcp_tool_waits_for_approval_and_a_refusal_never_reaches_the_server(gw, mode):
    """A configured agent's MCP tools ask first (issue 30): the call parks the task
    INPUT_REQUIRED with the call's data part; `approve` runs it on the MCP server
    (server-everything over Streamable HTTP), `deny` answers it without contacting the server."""
    c = client(gw, "tools", mode, streaming=False)
    task = (await collect(c.send_message(SendMessageRequest(message=message('tool:echo {"message": "via a2a"}')))))[0].task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
    pending = [MessageToDict(p) for p in task.status.message.parts if p.HasField("data")]
    assert pending and pending[0]["data"]["name"] == "echo" and pending[0]["data"]["kind"] == "confirmation", pending
    approve = message("approve", task_id=task.id, context_id=task.context_id)
    done = (await collect(c.send_message(SendMessageRequest(message=approve))))[0].task
    assert done.status.state == TaskState.TASK_STATE_COMPLETED, done
    assert any("Echo: via a2a" in t for t in texts(done)), texts(done)

    task = (await collect(c.send_message(SendMessageRequest(message=message(
        'tool:echo {"message": "refused"}', context_id=done.context_id)))))[0].task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    deny = message("deny", task_id=task.id, context_id=task.context_id)
    done = (await collect(c.send_message(SendMessageRequest(message=deny))))[0].task
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert not any("Echo: refused" in t for t in texts(done)), texts(done)
