"""Environments: create, retrieve, update, list, archive, delete and its guard."""

from __future__ import annotations

import anthropic
import pytest

from conftest import CLOUD
from helpers import ID, check_error, raw, raw_page


def test_create_and_retrieve_with_defaults_filled(client):
    r = client.beta.environments.with_raw_response.create(
        name="compat-env", config=CLOUD, description="an env", metadata={"team": "compat"})
    body = raw(r, "environment")
    assert ID["env"].fullmatch(body["id"])
    assert body["name"] == "compat-env" and body["description"] == "an env"
    assert body["metadata"] == {"team": "compat"}
    assert body["archived_at"] is None
    config = body["config"]
    assert config["type"] == "cloud"
    assert config["networking"] == {"type": "unrestricted"}
    assert {k: config["packages"][k] for k in ("apt", "cargo", "gem", "go", "npm", "pip")} == {
        "apt": [], "cargo": [], "gem": [], "go": [], "npm": [], "pip": []}
    # Extensions (ADR 0007 §14): defaults stored explicitly.
    assert config["sandbox_provisioning"] == "on_tool_use"
    assert config["provider"] == "local"

    got = raw(client.beta.environments.with_raw_response.retrieve(body["id"]), "environment")
    assert got == body


def test_create_with_extension_fields(client):
    config = {**CLOUD, "sandbox_provisioning": "eager", "provider": "local"}
    body = raw(client.beta.environments.with_raw_response.create(name="compat-eager", config=config), "environment")
    assert body["config"]["sandbox_provisioning"] == "eager"
    assert body["config"]["provider"] == "local"


def test_update_merges_metadata_and_null_deletes(client, make_env):
    env = make_env(metadata={"keep": "1", "drop": "2", "change": "3"})
    body = raw(client.beta.environments.with_raw_response.update(
        env.id, metadata={"drop": None, "change": "33", "new": "4"}, name="renamed"), "environment")
    assert body["metadata"] == {"keep": "1", "change": "33", "new": "4"}
    assert body["name"] == "renamed"
    assert body["config"]["type"] == "cloud"
    got = raw(client.beta.environments.with_raw_response.retrieve(env.id), "environment")
    assert got["metadata"] == body["metadata"] and got["name"] == "renamed"


def test_changing_config_type_is_rejected(client, make_env):
    env = make_env()
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.environments.update(env.id, config={"type": "self_hosted"})
    check_error(e.value, 400, "invalid_request_error", "invalid_config_type_change")


def test_list_and_archive(client, make_env):
    live, archived = make_env(name="compat-live"), make_env(name="compat-gone")
    body = raw(client.beta.environments.with_raw_response.archive(archived.id), "environment")
    assert body["archived_at"] is not None
    assert raw(client.beta.environments.with_raw_response.retrieve(archived.id), "environment")["archived_at"]

    first = raw_page(client.beta.environments.with_raw_response.list(limit=2), "environment")
    assert len(first["data"]) <= 2
    listed = [e.id for e in client.beta.environments.list(limit=2)]
    assert len(listed) == len(set(listed)), "an environment came twice while paginating"
    assert live.id in listed and archived.id not in listed
    everything = [e.id for e in client.beta.environments.list(limit=100, include_archived=True)]
    assert live.id in everything and archived.id in everything

    # Sessions cannot start on an archived environment.
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.sessions.create(agent=client.beta.agents.create(name="a", model="claude-opus-4-7").id,
                                    environment_id=archived.id)
    check_error(e.value, 400, "invalid_request_error", "environment_archived")


def test_delete_then_not_found(client, make_env):
    env = make_env()
    body = raw(client.beta.environments.with_raw_response.delete(env.id), "environment_deleted")
    assert body == {"id": env.id, "type": "environment_deleted"}
    with pytest.raises(anthropic.NotFoundError) as e:
        client.beta.environments.retrieve(env.id)
    check_error(e.value, 404, "not_found_error", "environment_not_found")


def test_delete_refused_while_a_session_uses_it(client, make_env, make_session):
    env = make_env()
    session = make_session(env=env)
    with pytest.raises(anthropic.ConflictError) as e:
        client.beta.environments.delete(env.id)
    check_error(e.value, 409, "conflict_error", "environment_in_use")
    assert raw(client.beta.environments.with_raw_response.retrieve(env.id), "environment")["id"] == env.id
    # Once the session is gone, nothing references the environment any more.
    raw(client.beta.sessions.with_raw_response.delete(session.id), "session_deleted")
    assert raw(client.beta.environments.with_raw_response.delete(env.id), "environment_deleted")["id"] == env.id


def test_session_on_unknown_environment_is_404(client, make_agent):
    agent = make_agent()
    with pytest.raises(anthropic.NotFoundError) as e:
        client.beta.sessions.create(agent=agent.id, environment_id="env_0000000000000000000000")
    check_error(e.value, 404, "not_found_error", "environment_not_found")
