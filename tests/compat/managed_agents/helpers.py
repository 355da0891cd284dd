"""Validation helpers of the Managed Agents compat suite (imported by conftest.py and the tests).

Every response is checked three ways:

1. the official SDK's own pydantic types validate it, leniently (as the SDK does with
   ``_strict_response_validation=True``) *and* with pydantic's strict mode on the raw JSON text;
2. the keys the protocol reference (shared/protocols/managed-agents.md, section 3) marks as
   required are present with the right JSON types, nullable ones included, because the SDK
   models turn a missing nullable key into ``None`` without complaint;
3. the ``request-id`` header starts with ``req_``.
"""

from __future__ import annotations

import base64
import json
import re
import time
from datetime import datetime, timezone
from typing import Any

import pydantic
from anthropic.types.beta import (
    BetaDeletedFile,
    BetaEnvironment,
    BetaEnvironmentDeleteResponse,
    BetaManagedAgentsAgent,
    BetaManagedAgentsDeletedSession,
    BetaFileMetadata,
    BetaManagedAgentsSession,
)
from anthropic.types.beta.sessions import (
    BetaManagedAgentsDeleteSessionResource,
    BetaManagedAgentsFileResource,
    BetaManagedAgentsGitHubRepositoryResource,
    BetaManagedAgentsSessionEvent,
    BetaManagedAgentsSessionResource,
    BetaManagedAgentsStreamSessionEvents,
)
from standardwebhooks import Webhook

EVENT_ADAPTER = pydantic.TypeAdapter(BetaManagedAgentsSessionEvent)
FRAME_ADAPTER = pydantic.TypeAdapter(BetaManagedAgentsStreamSessionEvents)

NULL = type(None)
TS = "rfc3339 timestamp"
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")

# ADR 0007 §2: ids are the prefix plus 22 base62 characters.
ID = {p: re.compile(rf"{p}_[0-9A-Za-z]{{22}}") for p in ("agent", "env", "sesn", "sevt", "key", "file", "sesrsc")}
# ADR 0007 §4: cursors are opaque `page_<base64url>` strings.
CURSOR = re.compile(r"page_[A-Za-z0-9_-]+=*")


def _ok(value: Any, kind: Any) -> bool:
    if kind == TS:
        return isinstance(value, str) and _RFC3339.fullmatch(value) is not None
    if kind is int:
        return type(value) is int
    if kind is bool:
        return type(value) is bool
    return isinstance(value, kind)


def require(obj: Any, spec: dict[str, Any], where: str) -> None:
    """Asserts every key of `spec` is present in `obj` with one of the given JSON types."""
    assert isinstance(obj, dict), f"{where}: expected a JSON object, got {obj!r}"
    for key, kinds in spec.items():
        assert key in obj, f"{where}: required key {key!r} is missing (keys: {sorted(obj)})"
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        assert any(_ok(obj[key], k) for k in kinds), f"{where}.{key} = {obj[key]!r} is not one of {kinds}"


def validate(model: Any, data: Any) -> Any:
    """Validates `data` with an SDK model class or TypeAdapter: lax, then strict on the JSON text."""
    text = json.dumps(data)
    if isinstance(model, pydantic.TypeAdapter):
        parsed = model.validate_python(data)
        model.validate_json(text, strict=True)
    else:
        parsed = model.model_validate(data)
        model.model_validate_json(text, strict=True)
    return parsed


def request_id(headers: Any) -> str:
    rid = headers.get("request-id")
    assert rid is not None and rid.startswith("req_"), f"request-id header is {rid!r}, expected req_..."
    return rid


# --- object shapes (reference §3, ADR 0007 §11 and §14) -----------------------------------------

AGENT_KEYS = {
    "id": str, "type": str, "name": str, "description": (str, NULL), "system": (str, NULL), "model": dict,
    "tools": list, "mcp_servers": list, "skills": list, "metadata": dict, "multiagent": (dict, NULL),
    "execution_identity": dict, "version": int, "created_at": TS, "updated_at": TS, "archived_at": (TS, NULL),
}
SESSION_AGENT_KEYS = {
    "id": str, "type": str, "name": str, "description": (str, NULL), "system": (str, NULL), "model": dict,
    "tools": list, "mcp_servers": list, "skills": list, "multiagent": (dict, NULL), "execution_identity": dict,
    "version": int,
}
ENV_KEYS = {
    "id": str, "type": str, "name": str, "description": (str, NULL), "metadata": dict, "config": dict,
    "created_at": TS, "updated_at": TS, "archived_at": (TS, NULL),
}
CLOUD_KEYS = {"type": str, "networking": dict, "packages": dict, "sandbox_provisioning": str, "provider": str}
PACKAGES_KEYS = {"type": str, "apt": list, "cargo": list, "gem": list, "go": list, "npm": list, "pip": list}
SESSION_KEYS = {
    "id": str, "type": str, "environment_id": str, "status": str, "agent": dict, "metadata": dict,
    "title": (str, NULL), "resources": list, "vault_ids": list, "outcome_evaluations": list, "stats": dict,
    "usage": dict, "budget": (dict, NULL), "deployment_id": (str, NULL), "created_at": TS, "updated_at": TS,
    "archived_at": (TS, NULL), "environment_state": str,
}
ENVIRONMENT_STATES = {"none", "realized", "hibernated", "released"}
FILE_KEYS = {"id": str, "type": str, "filename": str, "mime_type": str, "size_bytes": int, "created_at": TS,
             "downloadable": bool}
FILE_RESOURCE_KEYS = {"id": str, "type": str, "file_id": str, "mount_path": str, "created_at": TS, "updated_at": TS}
REPOSITORY_RESOURCE_KEYS = {"id": str, "type": str, "url": str, "mount_path": str, "checkout": (dict, NULL),
                            "created_at": TS, "updated_at": TS}


def check_tools(tools: list, where: str) -> None:
    for i, tool in enumerate(tools):
        require(tool, {"type": str}, f"{where}.tools[{i}]")
        if tool["type"] == "agent_toolset_20260401":
            require(tool, {"default_config": dict, "configs": list}, f"{where}.tools[{i}]")
            require(tool["default_config"], {"enabled": bool, "permission_policy": dict}, f"{where}.default_config")
            for j, c in enumerate(tool["configs"]):
                require(c, {"type": str, "name": str, "enabled": bool, "permission_policy": dict},
                        f"{where}.tools[{i}].configs[{j}]")
                assert c["type"] == c["name"], f"{where}: toolset config type {c['type']!r} != name {c['name']!r}"
        elif tool["type"] == "custom":
            require(tool, {"name": str, "description": str, "input_schema": dict}, f"{where}.tools[{i}]")


def check_agent(body: dict) -> None:
    require(body, AGENT_KEYS, "agent")
    assert body["type"] == "agent"
    assert ID["agent"].fullmatch(body["id"]), f"agent id {body['id']!r}"
    assert body["version"] >= 1
    require(body["model"], {"id": str}, "agent.model")
    require(body["execution_identity"], {"type": str}, "agent.execution_identity")
    check_tools(body["tools"], "agent")
    assert body.get("backend") == "native", f"extension agent.backend = {body.get('backend')!r}, expected 'native'"


def check_environment(body: dict) -> None:
    require(body, ENV_KEYS, "environment")
    assert body["type"] == "environment"
    assert ID["env"].fullmatch(body["id"]), f"environment id {body['id']!r}"
    config = body["config"]
    require(config, {"type": str}, "environment.config")
    if config["type"] == "cloud":
        require(config, CLOUD_KEYS, "environment.config")
        require(config["networking"], {"type": str}, "environment.config.networking")
        require(config["packages"], PACKAGES_KEYS, "environment.config.packages")
        assert config["sandbox_provisioning"] in ("on_tool_use", "eager"), config["sandbox_provisioning"]


def check_session(body: dict) -> None:
    require(body, SESSION_KEYS, "session")
    assert body["type"] == "session"
    assert ID["sesn"].fullmatch(body["id"]), f"session id {body['id']!r}"
    assert body["status"] in ("idle", "running", "rescheduling", "terminated"), body["status"]
    assert body["environment_state"] in ENVIRONMENT_STATES, body["environment_state"]
    require(body["agent"], SESSION_AGENT_KEYS, "session.agent")
    assert body["agent"]["type"] == "agent"
    check_tools(body["agent"]["tools"], "session.agent")
    for i, resource in enumerate(body["resources"]):
        check_session_resource(resource, f"session.resources[{i}]")


def check_file(body: dict) -> None:
    """A file's metadata (Files API): upload, retrieve_metadata, list items."""
    require(body, FILE_KEYS, "file")
    assert body["type"] == "file", body
    assert ID["file"].fullmatch(body["id"]), f"file id {body['id']!r}"
    assert body["size_bytes"] >= 0, body


def check_file_deleted(body: dict) -> None:
    require(body, {"id": str, "type": str}, "file_deleted")
    assert body["type"] == "file_deleted", body
    assert ID["file"].fullmatch(body["id"]), f"file id {body['id']!r}"


def check_file_resource(body: dict, where: str = "session_resource") -> None:
    """A session resource of type `file` (in `session.resources` and `/v1/sessions/{id}/resources`)."""
    require(body, FILE_RESOURCE_KEYS, where)
    assert body["type"] == "file", f"{where}: {body}"
    assert ID["sesrsc"].fullmatch(body["id"]), f"{where}: resource id {body['id']!r}"
    assert ID["file"].fullmatch(body["file_id"]), f"{where}: file_id {body['file_id']!r}"
    validate(BetaManagedAgentsFileResource, body)


def check_repository_resource(body: dict, where: str = "session_resource") -> None:
    """A session resource of type `github_repository`: `checkout` present (an object or null),
    and never its `authorization_token`."""
    require(body, REPOSITORY_RESOURCE_KEYS, where)
    assert body["type"] == "github_repository", f"{where}: {body}"
    assert ID["sesrsc"].fullmatch(body["id"]), f"{where}: resource id {body['id']!r}"
    assert "authorization_token" not in body, f"{where}: the token is shown: {sorted(body)}"
    checkout = body["checkout"]
    if checkout is not None:
        require(checkout, {"type": str}, f"{where}.checkout")
        assert checkout["type"] in ("branch", "commit"), f"{where}.checkout: {checkout}"
        require(checkout, {"name": str} if checkout["type"] == "branch" else {"sha": str}, f"{where}.checkout")
    validate(BetaManagedAgentsGitHubRepositoryResource, body)


def check_session_resource(body: dict, where: str = "session_resource") -> None:
    """Any session resource the gateway serves, checked by its type."""
    require(body, {"type": str}, where)
    checks = {"file": check_file_resource, "github_repository": check_repository_resource}
    assert body["type"] in checks, f"{where}: unexpected resource type {body['type']!r}"
    checks[body["type"]](body, where)


def check_session_resource_deleted(body: dict) -> None:
    require(body, {"id": str, "type": str}, "session_resource_deleted")
    assert body["type"] == "session_resource_deleted", body
    assert ID["sesrsc"].fullmatch(body["id"]), f"resource id {body['id']!r}"


def check_environment_deleted(body: dict) -> None:
    require(body, {"id": str, "type": str}, "environment_deleted")
    assert body["type"] == "environment_deleted"


def check_session_deleted(body: dict) -> None:
    require(body, {"id": str, "type": str}, "session_deleted")
    assert body["type"] == "session_deleted"


# --- events (reference §3.5) -------------------------------------------------------------------

EVENT_FIELDS: dict[str, dict[str, Any]] = {
    "user.message": {"content": list},
    "user.interrupt": {},
    "user.tool_confirmation": {"tool_use_id": str, "result": str},
    "user.custom_tool_result": {"custom_tool_use_id": str},
    "agent.message": {"content": list},
    "agent.thinking": {},
    "agent.tool_use": {"name": str, "input": dict},
    "agent.custom_tool_use": {"name": str, "input": dict},
    "agent.tool_result": {"tool_use_id": str},
    "user.tool_result": {"tool_use_id": str},
    "session.status_running": {},
    "session.status_rescheduled": {},
    "session.status_terminated": {},
    "session.status_idle": {"stop_reason": dict},
    "session.error": {"error": dict},
    "session.deleted": {},
    "session.updated": {},
    "session.usage": {"usage": dict},
    "session.thread_status_running": {"session_thread_id": str, "agent_name": str},
    "session.thread_status_idle": {"session_thread_id": str, "agent_name": str, "stop_reason": dict},
    "span.model_request_start": {},
    "span.model_request_end": {"model_request_start_id": str, "model_usage": dict},
}
USAGE_KEYS = {"input_tokens": int, "output_tokens": int, "cache_read_input_tokens": int,
              "cache_creation_input_tokens": int}


def check_event(e: dict, adapter: pydantic.TypeAdapter = EVENT_ADAPTER, where: str = "event") -> Any:
    """A persisted event (a list item, a send echo, or a non-preview stream frame)."""
    require(e, {"id": str, "type": str, "processed_at": (TS, NULL)}, where)
    kind = e["type"]
    where = f"{where}[{kind}]"
    assert ID["sevt"].fullmatch(e["id"]), f"{where}: event id {e['id']!r}"
    assert "session_id" not in e, f"{where}: events carry no session_id"
    if kind.split(".")[0] in ("agent", "session", "span"):
        assert e["processed_at"] is not None, f"{where}: processed_at must be non-null"
    require(e, EVENT_FIELDS.get(kind, {}), where)  # other types: the SDK adapter below decides
    if kind == "span.model_request_end":
        require(e["model_usage"], USAGE_KEYS, f"{where}.model_usage")
    elif kind == "session.status_idle":
        require(e["stop_reason"], {"type": str}, f"{where}.stop_reason")
        if e["stop_reason"]["type"] == "requires_action":
            require(e["stop_reason"], {"event_ids": list}, f"{where}.stop_reason")
    elif kind == "session.error":
        require(e["error"], {"type": str, "message": str, "retry_status": dict}, f"{where}.error")
    for i, block in enumerate(e.get("content") or []):
        require(block, {"type": str}, f"{where}.content[{i}]")
        if block["type"] == "text":
            require(block, {"text": str}, f"{where}.content[{i}]")
    return validate(adapter, e)


def check_frame(data: dict, where: str = "frame") -> Any:
    """One stream frame: a persisted event, or an `event_start` / `event_delta` preview."""
    require(data, {"type": str}, where)
    if data["type"] == "event_start":
        require(data, {"event": dict}, where)
        require(data["event"], {"type": str, "id": str}, f"{where}.event")
        assert ID["sevt"].fullmatch(data["event"]["id"]), data
        return validate(FRAME_ADAPTER, data)
    if data["type"] == "event_delta":
        require(data, {"event_id": str, "delta": dict}, where)
        require(data["delta"], {"type": str, "content": dict}, f"{where}.delta")
        return validate(FRAME_ADAPTER, data)
    return check_event(data, FRAME_ADAPTER, where)



# --- self-hosted environments (DESIGN §5a; gateway extensions the SDK does not type) -----------

CONNECTION_STATES = ("pending", "connected", "disconnected", "failed")
ENVIRONMENT_KEY_KEYS = {"type": str, "id": str, "environment_id": str, "name": str, "created_at": TS,
                        "revoked_at": (TS, NULL)}


def check_session_environment(body: dict) -> dict:
    """The `environment` extension of a self-hosted session object; returns it."""
    require(body, {"environment": dict}, "session")
    env = body["environment"]
    require(env, {"id": str, "type": str, "status": str, "remote_url": (str, NULL)}, "session.environment")
    assert env["id"] == body["environment_id"], f"session.environment.id {env['id']!r} != {body['environment_id']!r}"
    assert env["type"] == "self_hosted", env
    assert env["status"] in CONNECTION_STATES, env
    return env


def check_self_hosted_event(e: dict, where: str = "event") -> dict:
    """`agent.session.requires_action` and `agent.session.environment.<status>` (raw: not in the
    SDK's event union, which a strict client would reject)."""
    require(e, {"id": str, "type": str, "processed_at": TS}, where)
    kind = e["type"]
    where = f"{where}[{kind}]"
    assert ID["sevt"].fullmatch(e["id"]), f"{where}: event id {e['id']!r}"
    assert "session_id" not in e, f"{where}: events carry no session_id"
    if kind == "agent.session.requires_action":
        require(e, {"required_action": dict}, where)
        require(e["required_action"], {"type": str}, f"{where}.required_action")
        if e["required_action"]["type"] == "environment_connection":
            require(e["required_action"], {"environment_id": str}, f"{where}.required_action")
    elif kind.startswith("agent.session.environment."):
        status = kind.rsplit(".", 1)[1]
        assert status in CONNECTION_STATES, f"{where}: unknown connection status {status!r}"
        require(e, {"environment": dict}, where)
        require(e["environment"], {"id": str, "type": str, "status": str}, f"{where}.environment")
        assert e["environment"]["type"] == "self_hosted", f"{where}: {e['environment']}"
        assert e["environment"]["status"] == status, f"{where}: environment.status {e['environment']['status']!r}"
    else:
        raise AssertionError(f"{where}: unknown agent.session.* event type")
    return e


def check_listed_event(e: dict, where: str = "event") -> dict:
    """Any event of a self-hosted session's log: the extensions raw, everything else as check_event."""
    if isinstance(e, dict) and str(e.get("type", "")).startswith("agent.session."):
        return check_self_hosted_event(e, where)
    check_event(e, where=where)
    return e


def check_environment_key(body: dict, environment_id: str, secret: bool) -> dict:
    """An environment key object; `secret`: the create response, the only one with `key`."""
    require(body, ENVIRONMENT_KEY_KEYS, "environment_key")
    assert body["type"] == "environment_key", body
    assert ID["key"].fullmatch(body["id"]), f"environment key id {body['id']!r}"
    assert body["environment_id"] == environment_id, body
    if secret:
        require(body, {"key": str}, "environment_key")
        assert body["key"].startswith("gwe_"), "the key secret should start with gwe_"
    else:
        assert body.get("key") is None, "the key secret is shown only when the key is created"
    return body


# --- webhooks (gateway extension API; deliveries per Standard Webhooks) ----------------------

WEBHOOK_ENDPOINT_KEYS = {"id": str, "type": str, "url": str, "event_types": list, "status": str,
                         "consecutive_failures": int, "created_at": TS, "disabled_at": (TS, NULL)}
WEBHOOK_ENDPOINT_ID = re.compile(r"whk_[0-9A-Za-z]{22}")
WEBHOOK_EVENT_ID = re.compile(r"whe_[0-9A-Za-z]+")
# `whsec_` + the *standard* base64 alphabet (standardwebhooks drops `-`/`_` silently) of 32 bytes.
WEBHOOK_SECRET = re.compile(r"whsec_[A-Za-z0-9+/]{43}=?")


def check_webhook_endpoint(body: dict, secret: bool) -> dict:
    """A webhook endpoint object; `secret`: the create response, the only one with `secret`."""
    require(body, WEBHOOK_ENDPOINT_KEYS, "webhook_endpoint")
    assert body["type"] == "webhook_endpoint", body
    assert WEBHOOK_ENDPOINT_ID.fullmatch(body["id"]), f"webhook endpoint id {body['id']!r}"
    assert body["status"] in ("enabled", "disabled"), body
    assert all(isinstance(t, str) for t in body["event_types"]), body
    assert (body["status"] == "disabled") == (body["disabled_at"] is not None), (
        f"disabled_at must be set exactly when the endpoint is disabled: {body}")
    assert body["consecutive_failures"] >= 0, body
    if "description" in body:
        assert isinstance(body["description"], (str, NULL)), body
    if secret:
        require(body, {"secret": str}, "webhook_endpoint")
        assert WEBHOOK_SECRET.fullmatch(body["secret"]), (
            "the secret should be whsec_ + standard base64 of 32 bytes, got "
            f"{body['secret'][:6]!r}... ({len(body['secret'])} chars)")
        assert len(base64.b64decode(body["secret"][len("whsec_"):], validate=True)) == 32
    else:
        assert "secret" not in body or body["secret"] is None, "the secret is shown only when the endpoint is created"
    return body


def check_webhook_event(body: Any, where: str = "delivery") -> dict:
    """The JSON body of one delivery: `{"type": "event", "id": "whe_…", "created_at", "data": {"type", "id"}}`."""
    require(body, {"type": str, "id": str, "created_at": TS, "data": dict}, where)
    assert body["type"] == "event", f"{where}: type {body['type']!r}"
    assert WEBHOOK_EVENT_ID.fullmatch(body["id"]), f"{where}: id {body['id']!r}"
    require(body["data"], {"type": str, "id": str}, f"{where}.data")
    kind = body["data"]["type"]
    if kind == "agent.session.action_required":
        require(body["data"], {"required_action": dict}, f"{where}.data")
        require(body["data"]["required_action"], {"type": str}, f"{where}.data.required_action")
        if body["data"]["required_action"]["type"] == "environment_connection":
            require(body["data"]["required_action"], {"environment_id": str}, f"{where}.data.required_action")
    elif kind == "agent.session.failed":
        require(body["data"], {"error": dict}, f"{where}.data")
        require(body["data"]["error"], {"type": str, "message": str}, f"{where}.data.error")
    return body


def sign_webhook(secret: str, body: str, webhook_id: str, timestamp: int | None = None) -> dict[str, str]:
    """Standard Webhooks headers for `body`, signed with `secret` (what the gateway sends)."""
    ts = int(time.time()) if timestamp is None else timestamp
    signature = Webhook(secret).sign(webhook_id, datetime.fromtimestamp(ts, tz=timezone.utc), body)
    return {"webhook-id": webhook_id, "webhook-timestamp": str(ts), "webhook-signature": signature,
            "content-type": "application/json"}


# --- raw responses -----------------------------------------------------------------------------

OBJECTS = {
    "agent": (BetaManagedAgentsAgent, check_agent),
    "environment": (BetaEnvironment, check_environment),
    "session": (BetaManagedAgentsSession, check_session),
    "environment_deleted": (BetaEnvironmentDeleteResponse, check_environment_deleted),
    "session_deleted": (BetaManagedAgentsDeletedSession, check_session_deleted),
    "file": (BetaFileMetadata, check_file),
    "file_deleted": (BetaDeletedFile, check_file_deleted),
    "session_resource": (pydantic.TypeAdapter(BetaManagedAgentsSessionResource), check_session_resource),
    "session_resource_deleted": (BetaManagedAgentsDeleteSessionResource, check_session_resource_deleted),
}


def raw(r: Any, kind: str) -> dict:
    """A `with_raw_response` result: header, status, JSON body, SDK validation, required keys."""
    request_id(r.headers)
    assert r.status_code == 200, f"status {r.status_code}: {r.text()}"
    body = r.json()
    if kind == "event":
        check_event(body)
    else:
        model, check = OBJECTS[kind]
        validate(model, body)
        check(body)
    return body


def raw_page(r: Any, kind: str, prev_page: bool = False) -> dict:
    """A list page: `{data, next_page}` (+ `prev_page` for sessions), every item checked."""
    request_id(r.headers)
    assert r.status_code == 200, f"status {r.status_code}: {r.text()}"
    body = r.json()
    spec: dict[str, Any] = {"data": list, "next_page": (str, NULL)}
    if prev_page:
        spec["prev_page"] = (str, NULL)
    require(body, spec, f"page of {kind}")
    for key in ("next_page", "prev_page"):
        if body.get(key) is not None:
            assert CURSOR.fullmatch(body[key]), f"{key} {body[key]!r} is not page_<base64url>"
    for item in body["data"]:
        if kind == "event":
            check_event(item)
        else:
            model, check = OBJECTS[kind]
            validate(model, item)
            check(item)
    return body


def check_error_response(response: Any, status: int, etype: str, code: str | None = None) -> dict:
    """The error envelope of reference §1.6 on an httpx response (or an SDK exception's)."""
    rid = request_id(response.headers)
    assert response.status_code == status, f"status {response.status_code}, expected {status}: {response.text}"
    body = response.json()
    require(body, {"type": str, "error": dict, "request_id": str}, "error envelope")
    assert body["type"] == "error", body
    require(body["error"], {"type": str, "message": str}, "error envelope.error")
    assert body["error"]["type"] == etype, f"error.type {body['error']['type']!r}, expected {etype!r}: {body}"
    assert body["error"]["message"].strip(), "error.message is empty"
    assert body["request_id"] == rid, f"envelope request_id {body['request_id']!r} != header {rid!r}"
    if code is not None:
        details = body["error"].get("details")
        assert isinstance(details, dict), f"error.details missing, expected error_code {code!r}: {body}"
        assert details.get("error_code") == code, f"error_code {details.get('error_code')!r}, expected {code!r}"
    if status == 409:
        assert response.headers.get("x-should-retry") == "false", (
            f"409 must carry x-should-retry: false, got {response.headers.get('x-should-retry')!r}")
    return body


def check_error(exc: Any, status: int, etype: str, code: str | None = None) -> dict:
    """An SDK APIStatusError: its attributes and the raw envelope behind it."""
    assert exc.status_code == status, f"{type(exc).__name__} status {exc.status_code}, expected {status}"
    assert exc.request_id is not None and exc.request_id.startswith("req_"), exc.request_id
    body = check_error_response(exc.response, status, etype, code)
    assert exc.type == etype
    if code is not None:
        assert exc.error_code == code, f"SDK error_code {exc.error_code!r}, expected {code!r}"
    return body


# --- server-sent events ------------------------------------------------------------------------


def parse_sse(raw_bytes: bytes) -> tuple[list[dict], list[str]]:
    """Splits raw SSE bytes into frames (field lists) and comment lines; a trailing partial
    frame (a connection dropped mid-frame) is ignored."""
    text = raw_bytes.decode("utf-8")
    frames: list[dict] = []
    comments: list[str] = []
    fields: list[tuple[str, str]] = []
    lines = re.split(r"\r\n|\r|\n", text)
    complete = lines[:-1]  # the last element follows the final newline (or is a partial line)
    for line in complete:
        if line == "":
            if fields:
                frames.append({"fields": fields})
            fields = []
        elif line.startswith(":"):
            comments.append(line)
        else:
            name, _, value = line.partition(":")
            fields.append((name, value[1:] if value.startswith(" ") else value))
    return frames, comments


def check_sse_frame(frame: dict, where: str = "sse frame") -> dict:
    """Reference §6: `event:` equals `data.type`, exactly one `data:` line, `id:` equals the
    event id (ADR 0007 §7), the data validates as a stream frame. Returns the data."""
    fields = frame["fields"]
    names = [n for n, _ in fields]
    unknown = set(names) - {"event", "data", "id", "retry"}
    assert not unknown, f"{where}: unexpected SSE fields {unknown}: {fields}"
    assert names.count("data") == 1, f"{where}: expected exactly one data: line, got {fields}"
    assert names.count("event") == 1, f"{where}: expected exactly one event: line, got {fields}"
    value = dict(fields)
    data = json.loads(value["data"])
    assert value["event"] == data.get("type"), f"{where}: event: {value['event']!r} != data.type {data.get('type')!r}"
    if data["type"] not in ("event_start", "event_delta"):
        assert value.get("id") == data.get("id"), f"{where}: id: line {value.get('id')!r} != data.id {data.get('id')!r}"
    check_frame(data, where)
    return data


def text_of(event: Any) -> str:
    """The concatenated text blocks of an event (SDK object or dict)."""
    content = event["content"] if isinstance(event, dict) else event.content
    out = []
    for block in content or []:
        btype = block["type"] if isinstance(block, dict) else block.type
        if btype == "text":
            out.append(block["text"] if isinstance(block, dict) else block.text)
    return "".join(out)


# --- custom skills (test_skills.py) ------------------------------------------------------------

from anthropic.types.beta import BetaDeletedSkill, BetaSkill  # noqa: E402 (kept with the checks below)
from anthropic.types.beta.skills import BetaDeletedSkillVersion, BetaSkillVersion  # noqa: E402

SKILL_ID = re.compile(r"skill_[0-9A-Za-z]{22}")
SKILL_VERSION_ID = re.compile(r"skillver_[0-9A-Za-z]{22}")
SKILL_KEYS = {"id": str, "type": str, "display_name": str, "latest_version_id": str, "source": dict,
              "created_at": TS, "updated_at": TS}
SKILL_VERSION_KEYS = {"id": str, "type": str, "skill_id": str, "name": str, "description": str, "created_at": TS}


def check_skill(body: dict) -> None:
    """A skill (`client.beta.skills`): `source` is an object `{type}` (BetaSkillSource)."""
    require(body, SKILL_KEYS, "skill")
    assert body["type"] == "skill", body
    assert SKILL_ID.fullmatch(body["id"]), f"skill id {body['id']!r}"
    assert SKILL_VERSION_ID.fullmatch(body["latest_version_id"]), f"latest_version_id {body['latest_version_id']!r}"
    require(body["source"], {"type": str}, "skill.source")


def check_skill_deleted(body: dict) -> None:
    require(body, {"id": str, "type": str}, "skill_deleted")
    assert body["type"] == "skill_deleted", body
    assert SKILL_ID.fullmatch(body["id"]), f"skill id {body['id']!r}"


def check_skill_version(body: dict) -> None:
    require(body, SKILL_VERSION_KEYS, "skill_version")
    assert body["type"] == "skill_version", body
    assert SKILL_VERSION_ID.fullmatch(body["id"]), f"skill version id {body['id']!r}"
    assert SKILL_ID.fullmatch(body["skill_id"]), f"skill_id {body['skill_id']!r}"


def check_skill_version_deleted(body: dict) -> None:
    require(body, {"id": str, "type": str}, "skill_version_deleted")
    assert body["type"] == "skill_version_deleted", body
    assert SKILL_VERSION_ID.fullmatch(body["id"]), f"skill version id {body['id']!r}"


OBJECTS.update({
    "skill": (BetaSkill, check_skill),
    "skill_deleted": (BetaDeletedSkill, check_skill_deleted),
    "skill_version": (BetaSkillVersion, check_skill_version),
    "skill_version_deleted": (BetaDeletedSkillVersion, check_skill_version_deleted),
})
