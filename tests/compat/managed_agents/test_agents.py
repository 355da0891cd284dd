"""Agents: create, versions and optimistic concurrency, list and pagination, archive."""

from __future__ import annotations

import anthropic
import pytest
from anthropic.types.beta import BetaManagedAgentsAgent

from conftest import MODEL, Recorder, gateway_url, new_client
from helpers import ID, check_error, raw, raw_page, request_id, validate


def test_create_returns_version_one_with_materialised_toolset(client):
    r = client.beta.agents.with_raw_response.create(
        name="compat-create",
        model=MODEL,
        system="be brief",
        description="made by the compat suite",
        metadata={"suite": "compat"},
        tools=[
            {"type": "agent_toolset_20260401", "configs": [{"name": "bash", "permission_policy": {"type": "always_ask"}}]},
            {"type": "custom", "name": "lookup", "description": "looks up",
             "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}},
        ],
    )
    body = raw(r, "agent")
    assert ID["agent"].fullmatch(body["id"])
    assert body["version"] == 1
    assert body["name"] == "compat-create"
    assert body["system"] == "be brief"
    assert body["description"] == "made by the compat suite"
    assert body["metadata"] == {"suite": "compat"}
    assert body["model"]["id"] == MODEL
    assert body["archived_at"] is None
    assert body["backend"] == "native"
    assert body["execution_identity"] == {"type": "service_account"}
    toolset, custom = body["tools"]
    # ADR 0007 §11: default_config filled, configs = the configured tools with type and name.
    assert toolset["type"] == "agent_toolset_20260401"
    assert toolset["default_config"] == {"enabled": True, "permission_policy": {"type": "always_allow"}}
    assert toolset["configs"] == [
        {"type": "bash", "name": "bash", "enabled": True, "permission_policy": {"type": "always_ask"}}]
    assert custom["type"] == "custom" and custom["name"] == "lookup"
    assert custom["input_schema"]["type"] == "object"
    parsed = r.parse()
    assert isinstance(parsed, BetaManagedAgentsAgent) and parsed.id == body["id"]


def test_create_without_model_is_rejected(client):
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.agents.create(name="no-model", model=None)  # type: ignore[arg-type]
    body = check_error(e.value, 400, "invalid_request_error")
    assert "model" in body["error"]["message"]


def test_update_bumps_version_and_stale_version_conflicts_without_retry(client, make_agent):
    agent = make_agent(name="compat-v1", system="first")
    # A client that *would* retry a 409 (max_retries=2): x-should-retry: false must stop it.
    rec = Recorder()
    retrying = new_client(rec, max_retries=2)
    r = retrying.beta.agents.with_raw_response.update(agent.id, version=1, system="second")
    updated = raw(r, "agent")
    assert updated["version"] == 2 and updated["system"] == "second" and updated["name"] == "compat-v1"

    before = len(rec.requests)
    with pytest.raises(anthropic.ConflictError) as e:
        retrying.beta.agents.update(agent.id, version=1, system="third")
    assert len(rec.requests) - before == 1, f"the SDK retried the 409: {rec.requests[before:]}"
    check_error(e.value, 409, "conflict_error", "version_conflict")
    assert e.value.response.headers["x-should-retry"] == "false"
    assert not rec.problems, rec.problems
    retrying.close()

    # The stale update changed nothing.
    current = raw(client.beta.agents.with_raw_response.retrieve(agent.id), "agent")
    assert current["version"] == 2 and current["system"] == "second"


def test_retrieve_pinned_version_after_update(client, make_agent):
    agent = make_agent(name="compat-pin", system="v1 system")
    raw(client.beta.agents.with_raw_response.update(agent.id, version=1, system="v2 system"), "agent")
    latest = raw(client.beta.agents.with_raw_response.retrieve(agent.id), "agent")
    assert latest["version"] == 2 and latest["system"] == "v2 system"
    v1 = raw(client.beta.agents.with_raw_response.retrieve(agent.id, version=1), "agent")
    assert v1["version"] == 1 and v1["system"] == "v1 system" and v1["id"] == agent.id

    # A no-op update keeps the version (reference §2.1).
    same = raw(client.beta.agents.with_raw_response.update(agent.id, version=2, system="v2 system"), "agent")
    assert same["version"] == 2

    # versions list: one item per version, every item a full Agent.
    page = raw_page(client.beta.agents.versions.with_raw_response.list(agent.id), "agent")
    versions = sorted(item["version"] for item in page["data"])
    assert versions == [1, 2]
    assert {item["id"] for item in page["data"]} == {agent.id}
    by_version = {item["version"]: item for item in page["data"]}
    assert by_version[1]["system"] == "v1 system" and by_version[2]["system"] == "v2 system"
    # Paginated one at a time, the SDK walks both.
    walked = [a.version for a in client.beta.agents.versions.list(agent.id, limit=1)]
    assert sorted(walked) == [1, 2]


def test_update_merges_metadata_and_replaces_tools(client, make_agent):
    agent = make_agent(metadata={"a": "1", "b": "2"})
    body = raw(client.beta.agents.with_raw_response.update(
        agent.id, version=1, metadata={"b": None, "c": "3"}, tools=[]), "agent")
    assert body["metadata"] == {"a": "1", "c": "3"}
    assert body["tools"] == []
    assert body["version"] == 2


def test_update_null_clears_system_and_description_but_keeps_the_rest(client, make_agent):
    agent = make_agent(system="s", description="d", metadata={"k": "v"})
    body = raw(client.beta.agents.with_raw_response.update(agent.id, system=None, description=None), "agent")
    assert body["system"] is None and body["description"] is None
    assert body["metadata"] == {"k": "v"} and body["name"] == agent.name and body["model"]["id"] == MODEL
    assert body["version"] == 2, "an update without `version` is applied to the current version"


def test_list_limit_one_walks_every_agent_once(client, make_agent):
    mine = [make_agent(name=f"compat-list-{i}") for i in range(3)]
    since = mine[0].created_at
    seen: list[str] = []
    page_token = None
    pages = 0
    while True:
        kwargs = {"limit": 1, "created_at_gte": since}
        if page_token:
            kwargs["page"] = page_token
        body = raw_page(client.beta.agents.with_raw_response.list(**kwargs), "agent")
        assert len(body["data"]) <= 1
        seen.extend(item["id"] for item in body["data"])
        pages += 1
        page_token = body["next_page"]
        if page_token is None:
            break
        assert pages < 50, "pagination does not end"
    assert len(seen) == len(set(seen)), f"an agent came twice: {seen}"
    for a in mine:
        assert seen.count(a.id) == 1
    # The SDK's auto-pagination sees the same agents.
    auto = [a.id for a in client.beta.agents.list(limit=1, created_at_gte=since)]
    assert sorted(auto) == sorted(seen)


@pytest.mark.parametrize("limit", [0, 101])
def test_list_limit_out_of_range_is_400(client, limit):
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.agents.list(limit=limit)
    check_error(e.value, 400, "invalid_request_error")


def test_archive_hides_from_list_and_blocks_updates(client, make_agent):
    keep, gone = make_agent(name="compat-keep"), make_agent(name="compat-archived")
    body = raw(client.beta.agents.with_raw_response.archive(gone.id), "agent")
    assert body["archived_at"] is not None and body["id"] == gone.id
    # Still readable.
    again = raw(client.beta.agents.with_raw_response.retrieve(gone.id), "agent")
    assert again["archived_at"] == body["archived_at"]

    listed = [a.id for a in client.beta.agents.list(created_at_gte=keep.created_at, limit=100)]
    assert keep.id in listed and gone.id not in listed
    with_archived = [a.id for a in client.beta.agents.list(created_at_gte=keep.created_at, limit=100,
                                                            include_archived=True)]
    assert keep.id in with_archived and gone.id in with_archived

    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.agents.update(gone.id, version=1, system="nope")
    check_error(e.value, 400, "invalid_request_error", "agent_archived")


def test_unknown_agent_is_404(client):
    with pytest.raises(anthropic.NotFoundError) as e:
        client.beta.agents.retrieve("agent_0000000000000000000000")
    check_error(e.value, 404, "not_found_error", "agent_not_found")


def test_beta_header_is_optional(client, make_agent):
    agent = make_agent()
    # ADR 0007 §1: requests without anthropic-beta are served.
    r = client._client.get(f"{gateway_url()}/v1/agents/{agent.id}",
                           headers={"authorization": "Bearer test-key"})
    request_id(r.headers)
    assert r.status_code == 200, r.text
    validate(BetaManagedAgentsAgent, r.json())
