"""Authentication (ADR 0007 §15) on a second gateway that has an API key."""

from __future__ import annotations

import anthropic
import httpx2
import pytest

from conftest import MODEL
from helpers import check_error, check_error_response, raw, request_id

BETA = {"anthropic-beta": "managed-agents-2026-04-01"}


def sdk(gw, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=key, base_url=gw.url, max_retries=0, timeout=30,
                               _strict_response_validation=True)


def test_wrong_key_is_401(keyed_gateway):
    with sdk(keyed_gateway, "gwk_not-the-right-key") as c:
        with pytest.raises(anthropic.AuthenticationError) as e:
            c.beta.agents.list()
    check_error(e.value, 401, "authentication_error")


def test_missing_credentials_are_401(keyed_gateway):
    r = httpx2.get(f"{keyed_gateway.url}/v1/agents", headers=BETA, timeout=10)
    check_error_response(r, 401, "authentication_error")


def test_right_key_via_the_sdk_works(keyed_gateway):
    with sdk(keyed_gateway, keyed_gateway.key) as c:
        r = c.beta.agents.with_raw_response.create(name="keyed", model=MODEL)
        body = raw(r, "agent")
        assert body["name"] == "keyed"
        assert body["id"] in [a.id for a in c.beta.agents.list()]


def test_right_key_as_x_api_key_works(keyed_gateway):
    r = httpx2.post(f"{keyed_gateway.url}/v1/agents", headers={**BETA, "x-api-key": keyed_gateway.key},
                    json={"name": "keyed-x", "model": MODEL}, timeout=10)
    request_id(r.headers)
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "keyed-x"
    wrong = httpx2.get(f"{keyed_gateway.url}/v1/agents", headers={**BETA, "x-api-key": keyed_gateway.key + "x"},
                       timeout=10)
    check_error_response(wrong, 401, "authentication_error")


def test_bearer_and_x_api_key_are_equivalent(keyed_gateway):
    for headers in ({"authorization": f"Bearer {keyed_gateway.key}"}, {"x-api-key": keyed_gateway.key}):
        r = httpx2.get(f"{keyed_gateway.url}/v1/environments", headers={**BETA, **headers}, timeout=10)
        request_id(r.headers)
        assert r.status_code == 200, (headers.keys(), r.text)
        assert isinstance(r.json()["data"], list)
