"""Vaults and their credentials (`client.beta.vaults`, `client.beta.vaults.credentials`) through
the official SDK, every answer validated with its strict models (docs/adr/0024).

Secrets (`token`, `access_token`, `refresh_token`, `client_secret`) are write-only: no answer,
log line or database file of the gateway holds them. A vault holds one live credential per
normalized MCP server URL; `environment_variable` credentials are refused naming why; an
archived vault no longer changes. Sessions name vaults with `vault_ids`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.types.beta import BetaManagedAgentsDeletedVault, BetaManagedAgentsVault
from anthropic.types.beta.vaults import BetaManagedAgentsCredential, BetaManagedAgentsDeletedCredential

from conftest import create_agent, create_env, new_client, spawn_gateway
from helpers import check_error, raw, validate

SECRETS = ["tok-SECRET-static-1", "tok-SECRET-static-2", "at-SECRET-oauth", "rt-SECRET-refresh", "cs-SECRET-client"]


def vault_body(r: Any) -> dict:
    assert r.status_code == 200, r.text()
    body = r.json()
    validate(BetaManagedAgentsVault, body)
    assert body["id"].startswith("vlt_") and body["type"] == "vault", body
    return body


def credential_body(r: Any) -> dict:
    assert r.status_code == 200, r.text()
    body = r.json()
    validate(BetaManagedAgentsCredential, body)
    assert body["id"].startswith("vcrd_") and body["type"] == "vault_credential", body
    for s in SECRETS:
        assert s not in r.text(), f"a secret came back: {r.text()}"
    return body


def exercise(c: anthropic.Anthropic) -> tuple[str, str]:
    """Every vault and credential call; returns (vault id, credential id) left live."""
    v = c.beta.vaults
    vault = vault_body(v.with_raw_response.create(display_name="MCP tools", metadata={"team": "docs"}))
    vid = vault["id"]
    assert vault["archived_at"] is None and vault["metadata"] == {"team": "docs"}
    got = vault_body(v.with_raw_response.retrieve(vid))
    assert got == vault
    updated = vault_body(v.with_raw_response.update(vid, display_name="Tools", metadata={"team": None, "k": "v"}))
    assert (updated["display_name"], updated["metadata"]) == ("Tools", {"k": "v"}), updated

    creds = v.credentials
    bearer = credential_body(creds.with_raw_response.create(
        vid, display_name="docs server",
        auth={"type": "static_bearer", "token": SECRETS[0], "mcp_server_url": "https://mcp.example.com/mcp"}))
    assert bearer["auth"] == {"type": "static_bearer", "mcp_server_url": "https://mcp.example.com/mcp"}, bearer
    assert bearer["vault_id"] == vid
    oauth = credential_body(creds.with_raw_response.create(vid, auth={
        "type": "mcp_oauth", "access_token": SECRETS[2], "mcp_server_url": "https://oauth.example.com/mcp",
        "expires_at": "2999-01-01T00:00:00Z",
        "refresh": {"client_id": "cid", "refresh_token": SECRETS[3], "token_endpoint": "https://auth.example.com/token",
                    "token_endpoint_auth": {"type": "client_secret_post", "client_secret": SECRETS[4]},
                    "scope": "tools"}}))
    assert oauth["auth"]["refresh"]["token_endpoint_auth"] == {"type": "client_secret_post"}, oauth
    assert oauth["auth"]["expires_at"].startswith("2999-01-01"), oauth

    # The same server however spelled is taken; a foreign credential kind is refused by name.
    with pytest.raises(anthropic.ConflictError) as e:
        creds.create(vid, auth={"type": "static_bearer", "token": "x",
                                "mcp_server_url": "HTTPS://MCP.example.com:443/mcp/"})
    check_error(e.value, 409, "conflict_error", "credential_exists")
    with pytest.raises(anthropic.BadRequestError) as e:
        creds.create(vid, auth={"type": "environment_variable", "secret_name": "TOKEN", "secret_value": "v",
                                "networking": {"type": "unrestricted"},
                                "injection_location": {"header": True, "body": False}})
    body = check_error(e.value, 400, "invalid_request_error", "credential_type_not_supported")
    assert "environment_variable" in body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as e:
        creds.update(bearer["id"], vault_id=vid, auth={"type": "mcp_oauth", "access_token": "x"})
    check_error(e.value, 400, "invalid_request_error")

    rotated = credential_body(creds.with_raw_response.update(
        bearer["id"], vault_id=vid, auth={"type": "static_bearer", "token": SECRETS[1]}, metadata={"rotated": "yes"}))
    assert rotated["metadata"] == {"rotated": "yes"} and rotated["updated_at"] >= bearer["updated_at"]
    assert credential_body(creds.with_raw_response.retrieve(bearer["id"], vault_id=vid))["id"] == bearer["id"]

    page = creds.list(vid, limit=1)
    assert len(page.data) == 1 and page.next_page
    listed = [x.id for x in creds.list(vid)]
    assert listed == [oauth["id"], bearer["id"]], "newest first"

    archived = credential_body(creds.with_raw_response.archive(oauth["id"], vault_id=vid))
    assert archived["archived_at"] is not None
    assert [x.id for x in creds.list(vid)] == [bearer["id"]], "archived: hidden unless asked for"
    assert {x.id for x in creds.list(vid, include_archived=True)} == {bearer["id"], oauth["id"]}
    deleted = creds.with_raw_response.delete(oauth["id"], vault_id=vid)
    validate(BetaManagedAgentsDeletedCredential, deleted.json())
    with pytest.raises(anthropic.NotFoundError) as e:
        creds.retrieve(oauth["id"], vault_id=vid)
    check_error(e.value, 404, "not_found_error", "credential_not_found")

    assert vid in [x.id for x in v.list()]
    return vid, bearer["id"]


def test_vaults_and_credentials_round_trip_without_their_secrets(client: anthropic.Anthropic) -> None:
    vid, _ = exercise(client)
    v = client.beta.vaults
    # A session names the vault; an unknown vault cannot be named.
    agent = create_agent(client)
    env = create_env(client)
    session = client.beta.sessions.create(agent=agent.id, environment_id=env.id, vault_ids=[vid])
    assert session.vault_ids == [vid]
    with pytest.raises(anthropic.NotFoundError) as e:
        client.beta.sessions.create(agent=agent.id, environment_id=env.id, vault_ids=["vlt_" + "0" * 22])
    check_error(e.value, 404, "not_found_error", "vault_not_found")

    archived = vault_body(v.with_raw_response.archive(vid))
    assert archived["archived_at"] is not None
    with pytest.raises(anthropic.BadRequestError) as e:
        v.update(vid, display_name="again")
    check_error(e.value, 400, "invalid_request_error", "vault_archived")
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.sessions.create(agent=agent.id, environment_id=env.id, vault_ids=[vid])
    check_error(e.value, 400, "invalid_request_error", "vault_archived")
    assert vid not in [x.id for x in v.list()]
    assert vid in [x.id for x in v.list(include_archived=True)]

    deleted = v.with_raw_response.delete(vid)
    validate(BetaManagedAgentsDeletedVault, deleted.json())
    with pytest.raises(anthropic.NotFoundError) as e:
        v.credentials.list(vid)
    check_error(e.value, 404, "not_found_error", "vault_not_found")


def test_no_secret_reaches_the_database_files_or_the_log() -> None:
    """A gateway of its own, so its ./data/ and log can be read whole after the calls."""
    with spawn_gateway("vaults-at-rest", api_key=False) as gw:
        c = new_client(base_url=gw.url)
        exercise(c)
        c.close()
        files = [p for p in Path(gw.workdir).rglob("*") if p.is_file()]
        assert any(p.name == "gateway.db" for p in files), [str(p) for p in files]
        for p in files:
            data = p.read_bytes()
            for s in SECRETS:
                assert s.encode() not in data, f"{s} in {p} ({os.path.getsize(p)} bytes)"
