"""Errors: the envelope, not found, malformed bodies, oversized bodies, unsupported features."""

from __future__ import annotations

import json
import select
import socket
from urllib.parse import urlsplit

import anthropic
import httpx2
import pytest

from conftest import CLOUD, MODEL, gateway_url, user_message
from helpers import check_error, check_error_response, request_id

HEADERS = {"authorization": "Bearer test-key", "anthropic-beta": "managed-agents-2026-04-01",
           "content-type": "application/json"}
MISSING = "sesn_0000000000000000000000"


def test_unknown_session_is_not_found_with_envelope(client):
    with pytest.raises(anthropic.NotFoundError) as e:
        client.beta.sessions.retrieve(MISSING)
    body = check_error(e.value, 404, "not_found_error", "session_not_found")
    assert e.value.request_id == body["request_id"]
    for call in (lambda: client.beta.sessions.events.list(MISSING),
                 lambda: client.beta.sessions.events.send(MISSING, events=[user_message("hi")]),
                 lambda: client.beta.sessions.events.stream(MISSING),
                 lambda: client.beta.sessions.delete(MISSING)):
        with pytest.raises(anthropic.NotFoundError) as e:
            call()
        check_error(e.value, 404, "not_found_error", "session_not_found")


def test_malformed_json_is_400_naming_the_problem():
    r = httpx2.post(f"{gateway_url()}/v1/agents", headers=HEADERS, content=b'{"name": "x", "model": ', timeout=10)
    body = check_error_response(r, 400, "invalid_request_error")
    message = body["error"]["message"].lower()
    assert "json" in message or "pars" in message or "eof" in message, body


def test_wrong_field_type_is_400_naming_the_field():
    r = httpx2.post(f"{gateway_url()}/v1/agents", headers=HEADERS,
                    content=json.dumps({"name": 5, "model": MODEL}).encode(), timeout=10)
    body = check_error_response(r, 400, "invalid_request_error")
    assert "name" in body["error"]["message"], body


def post_oversized(url: str, size: int) -> tuple[int, bytes]:
    """POSTs `size` bytes of JSON over a raw socket, stopping as soon as the server answers
    (a server may answer 413 and close before reading the whole body). Returns (status, raw)."""
    parts = urlsplit(url)
    head = (f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer test-key\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n").encode()
    prefix = b'{"name": "big", "model": "' + MODEL.encode() + b'", "description": "'
    suffix = b'"}'
    filler = size - len(prefix) - len(suffix)
    chunk = b"a" * (1 << 20)
    received = b""
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(head + prefix)
        sent = 0
        try:
            while sent < filler:
                readable, _, _ = select.select([sock], [], [], 0)
                if readable:
                    break
                n = min(len(chunk), filler - sent)
                sock.sendall(chunk[:n])
                sent += n
            else:
                sock.sendall(suffix)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                received += data
                if b"\r\n\r\n" in received and len(received) > 4096:
                    break
        except (ConnectionResetError, socket.timeout):
            pass
    assert received.startswith(b"HTTP/1.1 "), f"no HTTP response: {received[:200]!r}"
    return int(received.split(b" ", 2)[1]), received


def test_body_over_32_mib_is_413():
    status, response = post_oversized(f"{gateway_url()}/v1/agents", 33 * 1024 * 1024)
    assert status == 413, response[:500]
    head = response.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
    assert "\r\nrequest-id: req_" in head, head


def test_body_under_the_limit_is_served(client):
    # A 1 MiB description is fine: the limit is 32 MB, not something small.
    agent = client.beta.agents.create(name="big-but-ok", model=MODEL, description="d" * (1 << 20))
    assert len(agent.description or "") == 1 << 20


def test_unsupported_features_are_400_not_supported(client, make_agent, make_env, make_session):
    agent, env = make_agent(), make_env()
    cases = [
        lambda: client.beta.sessions.create(
            agent=agent.id, environment_id=env.id,
            resources=[{"type": "memory_store", "memory_store_id": "memstore_x"}]),
    ]
    for call in cases:
        with pytest.raises(anthropic.BadRequestError) as e:
            call()
        check_error(e.value, 400, "invalid_request_error", "not_supported")
    # Budgets are supported (test_budgets.py); the default fake model has no list price.
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.sessions.create(agent=agent.id, environment_id=env.id,
                                    budget={"type": "limit", "max_list_cost": {"amount": "2500", "currency": "USD"}})
    check_error(e.value, 400, "invalid_request_error", "model_not_budgetable")
    # Vaults exist (test_vaults.py): one that does not is not found, whatever its spelling.
    with pytest.raises(anthropic.NotFoundError) as e:
        client.beta.sessions.create(agent=agent.id, environment_id=env.id, vault_ids=["vlt_x"])
    check_error(e.value, 404, "not_found_error", "vault_not_found")
    s = make_session(agent=agent, env=env)
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.sessions.events.send(s.id, events=[{
            "type": "user.define_outcome", "description": "done",
            "rubric": {"type": "text", "content": "is it done?"}}])
    check_error(e.value, 400, "invalid_request_error", "not_supported")


    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.sessions.events.send(s.id, events=[{
            "type": "system.message", "content": [{"type": "text", "text": "be quick"}]}])
    check_error(e.value, 400, "invalid_request_error", "not_supported")


def test_unsupported_route_families_are_404(client, make_session):
    s = make_session()
    for call in (client.beta.memory_stores.list, lambda: client.beta.sessions.threads.list(s.id)):
        with pytest.raises(anthropic.NotFoundError) as e:
            call()
        check_error(e.value, 404, "not_found_error")


def test_unmet_placement_is_refused_with_the_rule_code(client, make_agent):
    # ADR 0007 §5: placement refusals are 400 with the rule's code; an unknown sandbox provider is
    # refused when the environment is created or, at the latest, when a session is placed on it.
    config = {**CLOUD, "provider": "no-such-provider"}
    try:
        env = client.beta.environments.create(name="bad-provider", config=config)
    except anthropic.BadRequestError as e:
        check_error(e, 400, "invalid_request_error", "provider_unavailable")
        return
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.sessions.create(agent=make_agent().id, environment_id=env.id)
    check_error(e.value, 400, "invalid_request_error", "provider_unavailable")


def test_unknown_query_parameters_are_ignored(client):
    # The docs' curl appends ?beta=true (the SDK does too); anything else unknown is ignored as well.
    r = httpx2.post(f"{gateway_url()}/v1/environments?beta=true&whatever=1", headers=HEADERS,
                    content=json.dumps({"name": "q", "config": CLOUD}).encode(), timeout=10)
    assert r.status_code == 200, r.text
    request_id(r.headers)
    assert r.json()["type"] == "environment"
