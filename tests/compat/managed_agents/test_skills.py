"""Custom skills (`client.beta.skills`: create, list, retrieve, delete;
`client.beta.skills.versions`: create, list, retrieve, delete) and agents that use them
(`skills=[{"type": "custom", "skill_id", "version"?}]`), through the official SDK.

A skill is uploaded as files under one top-level directory holding a `SKILL.md` whose
frontmatter names and describes it. A session places the version it uses at `skills/<name>/`
in its workspace: a file whose content starts with `#!` is executable (multipart carries no
modes), every other file is 0644. The version is frozen when the session is created (`version`
omitted = the latest then). The agent's own tools, driven by the fake model (`tool:bash {...}`),
run the skill's script: relative to the workspace on the local sandbox, at `/workspace/skills/`
on the `namespace` sandbox (a gateway of its own, `spawn_gateway`).

Prebuilt (`anthropic`) skills do not exist here: naming one is 400 `not_supported`.
"""

from __future__ import annotations

import shutil
from datetime import datetime, timezone
from typing import Any, Iterator

import anthropic
import pytest

from conftest import MODEL, TOOLSET, Recorder, create_agent, create_env, new_client, spawn_gateway
from helpers import check_error, raw, raw_page
from test_files import ISOLATED, tool_turn

DESCRIPTION = "Greets people by name"
HELLO = b'#!/bin/sh\necho "hello, $1"\n'
HOWDY = b'#!/bin/sh\necho "howdy, $1"\n'
NOT_A_SKILL = "skill_" + "0" * 22
NOT_A_VERSION = "skillver_" + "0" * 22
SCRIPT = "skills/greeter/scripts/hello.sh"
MANIFEST = "skills/greeter/SKILL.md"


def skill_md(name: str = "greeter", description: str = DESCRIPTION) -> bytes:
    return f"---\nname: {name}\ndescription: {description}\n---\nRun scripts/hello.sh NAME\n".encode()


def greeter(script: bytes = HELLO, name: str = "greeter", top: str = "greeter") -> list[tuple[str, bytes, str]]:
    """The files of the `greeter` skill, as `files=` takes them: (path, bytes, mime)."""
    return [(f"{top}/SKILL.md", skill_md(name), "text/markdown"),
            (f"{top}/scripts/hello.sh", script, "text/x-shellscript")]


def at(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


def assert_now(timestamp: str, before: datetime) -> None:
    assert abs((at(timestamp) - before).total_seconds()) < 60, f"{timestamp} is not now ({before})"


def create_skill(c: anthropic.Anthropic, files: list | None = None, **kwargs: Any) -> dict:
    """`skills.create` through `with_raw_response`: checked raw, a custom skill made now."""
    before = datetime.now(timezone.utc)
    body = raw(c.beta.skills.with_raw_response.create(files=files or greeter(), **kwargs), "skill")
    assert body["source"] == {"type": "custom"}, body
    assert_now(body["created_at"], before)
    assert at(body["updated_at"]) >= at(body["created_at"]), body
    return body


def add_version(c: anthropic.Anthropic, skill_id: str, files: list) -> dict:
    before = datetime.now(timezone.utc)
    body = raw(c.beta.skills.versions.with_raw_response.create(skill_id, files=files), "skill_version")
    assert body["skill_id"] == skill_id, body
    assert_now(body["created_at"], before)
    return body


def retrieve_skill(c: anthropic.Anthropic, skill_id: str) -> dict:
    return raw(c.beta.skills.with_raw_response.retrieve(skill_id), "skill")


def retrieve_version(c: anthropic.Anthropic, skill_id: str, version: str) -> dict:
    return raw(c.beta.skills.versions.with_raw_response.retrieve(version, skill_id=skill_id), "skill_version")


def listed_skills(c: anthropic.Anthropic, limit: int | None = None, **kwargs: Any) -> list[dict]:
    """Every skill, raw and checked, walking next_page; each page at most `limit` long."""
    out: list[dict] = []
    page = None
    while True:
        args: dict[str, Any] = dict(kwargs)
        if page:
            args["page"] = page
        if limit is not None:
            args["limit"] = limit
        body = raw_page(c.beta.skills.with_raw_response.list(**args), "skill")
        if limit is not None:
            assert len(body["data"]) <= limit, f"a page of {len(body['data'])} skills for limit={limit}"
        out.extend(body["data"])
        page = body["next_page"]
        if page is None:
            assert len({s["id"] for s in out}) == len(out), f"a skill listed twice: {[s['id'] for s in out]}"
            return out


def listed_versions(c: anthropic.Anthropic, skill_id: str, limit: int | None = None) -> list[dict]:
    out: list[dict] = []
    page = None
    while True:
        args: dict[str, Any] = {"page": page} if page else {}
        if limit is not None:
            args["limit"] = limit
        body = raw_page(c.beta.skills.versions.with_raw_response.list(skill_id, **args), "skill_version")
        if limit is not None:
            assert len(body["data"]) <= limit, f"a page of {len(body['data'])} versions for limit={limit}"
        out.extend(body["data"])
        page = body["next_page"]
        if page is None:
            assert len({v["id"] for v in out}) == len(out), f"a version listed twice: {[v['id'] for v in out]}"
            return out


def skill_ref(skill_id: str, version: str | None = None) -> dict:
    ref = {"type": "custom", "skill_id": skill_id}
    if version is not None:
        ref["version"] = version
    return ref


def skill_agent(c: anthropic.Anthropic, skill_id: str, version: str | None = None) -> Any:
    """An agent (toolset on) with the one custom skill; its reference reads back as given."""
    agent = create_agent(c, skills=[skill_ref(skill_id, version)])
    shown = raw(c.beta.agents.with_raw_response.retrieve(agent.id), "agent")["skills"]
    assert [(s["type"], s["skill_id"]) for s in shown] == [("custom", skill_id)], shown
    if version is not None:
        assert shown[0]["version"] == version, shown
    return agent


def skill_session(c: anthropic.Anthropic, agent: Any, env: Any = None) -> dict:
    """A session on `agent`; its agent snapshot names the agent's skill. Returns its raw body."""
    env = env if env is not None else create_env(c)
    body = raw(c.beta.sessions.with_raw_response.create(agent=agent.id, environment_id=env.id), "session")
    want = [(s.type, s.skill_id) for s in agent.skills]
    assert [(s["type"], s["skill_id"]) for s in body["agent"]["skills"]] == want, body["agent"]["skills"]
    return body


def greet(c: anthropic.Anthropic, session_id: str, script: str = SCRIPT) -> str:
    """Runs the skill's script with `world` (bash, one turn); returns its output."""
    return tool_turn(c, session_id, "bash", {"command": f"{script} world"})


# --- skills ------------------------------------------------------------------------------------


def test_create_retrieve_delete(client):
    made = create_skill(client, display_name="Greeter")
    assert made["display_name"] == "Greeter", made
    assert retrieve_skill(client, made["id"]) == made
    parsed = client.beta.skills.retrieve(made["id"])
    assert (parsed.id, parsed.display_name, parsed.latest_version_id, parsed.source.type) == (
        made["id"], "Greeter", made["latest_version_id"], "custom")
    # The first version is the latest, named and described by its SKILL.md.
    latest = retrieve_version(client, made["id"], "latest")
    assert latest["id"] == made["latest_version_id"], (latest, made)
    assert (latest["skill_id"], latest["name"], latest["description"]) == (made["id"], "greeter", DESCRIPTION)
    assert retrieve_version(client, made["id"], latest["id"]) == latest
    assert listed_versions(client, made["id"]) == [latest]

    # Without display_name it is the SKILL.md name.
    plain = create_skill(client)
    assert plain["display_name"] == "greeter", plain
    assert plain["id"] != made["id"] and plain["latest_version_id"] != made["latest_version_id"]

    deleted = raw(client.beta.skills.with_raw_response.delete(made["id"]), "skill_deleted")
    assert deleted == {"id": made["id"], "type": "skill_deleted"}, deleted
    gone = [lambda: client.beta.skills.retrieve(made["id"]),
            lambda: client.beta.skills.delete(made["id"]),
            lambda: client.beta.skills.versions.retrieve("latest", skill_id=made["id"]),
            lambda: client.beta.skills.versions.retrieve(latest["id"], skill_id=made["id"]),
            lambda: client.beta.skills.versions.list(made["id"]),
            lambda: client.beta.skills.versions.create(made["id"], files=greeter())]
    for call in gone:
        with pytest.raises(anthropic.NotFoundError) as e:
            call()
        check_error(e.value, 404, "not_found_error")
    ids = [s["id"] for s in listed_skills(client)]
    assert made["id"] not in ids and plain["id"] in ids, ids
    # The other skill is untouched.
    assert retrieve_skill(client, plain["id"]) == plain


def test_unknown_skills_and_versions_are_404(client):
    skill = create_skill(client)
    calls = [lambda: client.beta.skills.retrieve(NOT_A_SKILL),
             lambda: client.beta.skills.delete(NOT_A_SKILL),
             lambda: client.beta.skills.retrieve("not-an-id"),
             lambda: client.beta.skills.versions.retrieve("latest", skill_id=NOT_A_SKILL),
             lambda: client.beta.skills.versions.retrieve(NOT_A_VERSION, skill_id=skill["id"]),
             lambda: client.beta.skills.versions.delete(NOT_A_VERSION, skill_id=skill["id"])]
    for call in calls:
        with pytest.raises(anthropic.NotFoundError) as e:
            call()
        check_error(e.value, 404, "not_found_error")


def test_list_is_oldest_first_in_cursor_pages(client):
    made = [create_skill(client, display_name=f"page {i}") for i in range(3)]
    ids = [m["id"] for m in made]
    # Ours are the newest skills, so the last three of an oldest-first list.
    walked = listed_skills(client, limit=2)
    assert [s["id"] for s in walked][-3:] == ids, [s["id"] for s in walked]
    assert [s.id for s in client.beta.skills.list(limit=2)] == [s["id"] for s in walked]
    assert listed_skills(client) == walked
    for m in made:
        assert {s["id"]: s for s in walked}[m["id"]] == m, "a listed skill reads as its create did"
    # A page boundary inside ours: the cursor goes on from where the page ended.
    first = raw_page(client.beta.skills.with_raw_response.list(limit=len(walked) - 1), "skill")
    assert [s["id"] for s in first["data"]] == [s["id"] for s in walked[:-1]], first["data"]
    assert first["next_page"] is not None, "one skill is left: there is a next page"
    rest = raw_page(client.beta.skills.with_raw_response.list(limit=2, page=first["next_page"]), "skill")
    assert [s["id"] for s in rest["data"]] == [ids[-1]] and rest["next_page"] is None, rest

    # Every skill here is custom; there are no prebuilt ones.
    assert listed_skills(client, source="custom") == walked
    prebuilt = raw_page(client.beta.skills.with_raw_response.list(source="anthropic"), "skill")
    assert prebuilt["data"] == [] and prebuilt["next_page"] is None, prebuilt


# --- versions ----------------------------------------------------------------------------------


def test_versions_create_list_retrieve_delete(client):
    skill = create_skill(client, display_name="Greeter")
    v1 = retrieve_version(client, skill["id"], "latest")
    v2 = add_version(client, skill["id"], greeter(HOWDY))
    v3 = add_version(client, skill["id"], greeter(b"#!/bin/sh\necho \"hey, $1\"\n"))
    assert len({v1["id"], v2["id"], v3["id"]}) == 3
    for v in (v2, v3):
        assert (v["name"], v["description"]) == ("greeter", DESCRIPTION), v

    # The newest is the latest; the skill itself keeps its id and display name.
    now = retrieve_skill(client, skill["id"])
    assert now["latest_version_id"] == v3["id"], now
    assert (now["id"], now["display_name"], now["created_at"]) == (skill["id"], "Greeter", skill["created_at"])
    assert at(now["updated_at"]) >= at(skill["updated_at"]), (skill, now)
    assert retrieve_version(client, skill["id"], "latest") == v3
    for v in (v1, v2, v3):
        assert retrieve_version(client, skill["id"], v["id"]) == v
    parsed = client.beta.skills.versions.retrieve(v2["id"], skill_id=skill["id"])
    assert (parsed.id, parsed.skill_id, parsed.name) == (v2["id"], skill["id"], "greeter")

    # Newest first, in cursor pages.
    assert listed_versions(client, skill["id"]) == [v3, v2, v1]
    first = raw_page(client.beta.skills.versions.with_raw_response.list(skill["id"], limit=2), "skill_version")
    assert first["data"] == [v3, v2] and first["next_page"] is not None, first
    second = raw_page(client.beta.skills.versions.with_raw_response.list(
        skill["id"], limit=2, page=first["next_page"]), "skill_version")
    assert second["data"] == [v1] and second["next_page"] is None, second
    assert [v.id for v in client.beta.skills.versions.list(skill["id"], limit=2)] == [v3["id"], v2["id"], v1["id"]]

    # Deleting the latest makes the one before it the latest.
    deleted = raw(client.beta.skills.versions.with_raw_response.delete(v3["id"], skill_id=skill["id"]),
                  "skill_version_deleted")
    assert deleted == {"id": v3["id"], "type": "skill_version_deleted"}, deleted
    with pytest.raises(anthropic.NotFoundError) as e:
        client.beta.skills.versions.retrieve(v3["id"], skill_id=skill["id"])
    check_error(e.value, 404, "not_found_error")
    assert retrieve_skill(client, skill["id"])["latest_version_id"] == v2["id"]
    assert retrieve_version(client, skill["id"], "latest") == v2
    assert listed_versions(client, skill["id"]) == [v2, v1]

    # An older one goes too; the only version left cannot.
    raw(client.beta.skills.versions.with_raw_response.delete(v1["id"], skill_id=skill["id"]), "skill_version_deleted")
    assert listed_versions(client, skill["id"]) == [v2]
    with pytest.raises(anthropic.ConflictError) as e:
        client.beta.skills.versions.delete(v2["id"], skill_id=skill["id"])
    check_error(e.value, 409, "conflict_error")
    assert listed_versions(client, skill["id"]) == [v2]
    assert retrieve_skill(client, skill["id"])["latest_version_id"] == v2["id"]


def test_a_version_keeps_the_skills_name(client):
    skill = create_skill(client)
    for files in (greeter(name="other", top="other"), greeter(name="other")):
        with pytest.raises(anthropic.BadRequestError) as e:
            client.beta.skills.versions.create(skill["id"], files=files)
        check_error(e.value, 400, "invalid_request_error")
    assert [v["id"] for v in listed_versions(client, skill["id"])] == [skill["latest_version_id"]]
    # The same name uploaded from another directory is the same skill.
    same = add_version(client, skill["id"], greeter(top="greeter-v2"))
    assert same["name"] == "greeter", same
    assert [v["id"] for v in listed_versions(client, skill["id"])] == [same["id"], skill["latest_version_id"]]


BAD_UPLOADS = {
    "no SKILL.md": [("greeter/README.md", b"# greeter\n", "text/markdown"),
                    ("greeter/scripts/hello.sh", HELLO, "text/x-shellscript")],
    "two top-level directories": [("greeter/SKILL.md", skill_md(), "text/markdown"),
                                  ("other/scripts/hello.sh", HELLO, "text/x-shellscript")],
    "a .. path to the manifest": [("greeter/../SKILL.md", skill_md(), "text/markdown")],
    "a .. path out of the skill": [("greeter/SKILL.md", skill_md(), "text/markdown"),
                                   ("greeter/../../etc/hello.sh", HELLO, "text/x-shellscript")],
    "SKILL.md without frontmatter": [("greeter/SKILL.md", b"# greeter\nRun scripts/hello.sh NAME\n",
                                      "text/markdown")],
}


@pytest.mark.parametrize("why", sorted(BAD_UPLOADS))
def test_bad_uploads_are_400(client, why):
    before = [s["id"] for s in listed_skills(client)]
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.skills.create(files=BAD_UPLOADS[why], display_name="bad")
    check_error(e.value, 400, "invalid_request_error")
    assert [s["id"] for s in listed_skills(client)] == before, f"a refused upload ({why}) left a skill"

    skill = create_skill(client)
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.skills.versions.create(skill["id"], files=BAD_UPLOADS[why])
    check_error(e.value, 400, "invalid_request_error")
    assert [v["id"] for v in listed_versions(client, skill["id"])] == [skill["latest_version_id"]], (
        f"a refused upload ({why}) left a version")


# --- agents and sessions -----------------------------------------------------------------------


def test_a_session_runs_the_skills_script(client):
    skill = create_skill(client, display_name="Greeter")
    s = skill_session(client, skill_agent(client, skill["id"]))
    assert "hello, world" in greet(client, s["id"]).splitlines(), "the skill's script did not greet"
    out = tool_turn(client, s["id"], "bash", {"command": f"stat -c '%n %a' {SCRIPT} {MANIFEST}"})
    assert f"{SCRIPT} 755" in out.splitlines(), f"the script is not 0755: {out}"
    assert f"{MANIFEST} 644" in out.splitlines(), f"SKILL.md is not 0644: {out}"
    out = tool_turn(client, s["id"], "bash", {"command": f"cat {MANIFEST}"})
    assert skill_md().decode() in out, f"SKILL.md is not as uploaded: {out}"


def test_sessions_keep_the_version_they_were_created_with(client):
    skill = create_skill(client)
    v1 = skill["latest_version_id"]
    agent = skill_agent(client, skill["id"])  # no version: the latest when a session is created
    env = create_env(client)
    before = skill_session(client, agent, env)
    v2 = add_version(client, skill["id"], greeter(HOWDY))
    after = skill_session(client, agent, env)
    pinned = skill_session(client, skill_agent(client, skill["id"], version=v1), env)

    # The first turn of each session comes after the new version exists.
    old = greet(client, before["id"]).splitlines()
    assert "hello, world" in old and "howdy, world" not in old, f"created before {v2['id']}: {old}"
    new = greet(client, after["id"]).splitlines()
    assert "howdy, world" in new and "hello, world" not in new, f"created after {v2['id']}: {new}"
    old = greet(client, pinned["id"]).splitlines()
    assert "hello, world" in old, f"pinned to {v1}: {old}"
    # And they keep it on later turns.
    assert "hello, world" in greet(client, before["id"]).splitlines()


def test_prebuilt_skills_are_not_supported(client):
    prebuilt = {"type": "anthropic", "skill_id": "pdf"}
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.agents.create(name="prebuilt", model=MODEL, tools=[TOOLSET], skills=[prebuilt])
    body = check_error(e.value, 400, "invalid_request_error", "not_supported")
    assert "pdf" in body["error"]["message"], f"the 400 should name the skill: {body}"

    agent = create_agent(client)
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.agents.update(agent.id, version=1, skills=[prebuilt])
    body = check_error(e.value, 400, "invalid_request_error", "not_supported")
    assert "pdf" in body["error"]["message"], f"the 400 should name the skill: {body}"
    assert raw(client.beta.agents.with_raw_response.retrieve(agent.id), "agent")["version"] == 1


def test_a_session_on_an_agent_whose_skill_was_deleted_is_404(client):
    skill = create_skill(client)
    agent = skill_agent(client, skill["id"])
    env = create_env(client)
    raw(client.beta.skills.with_raw_response.delete(skill["id"]), "skill_deleted")
    with pytest.raises(anthropic.NotFoundError) as e:
        client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    body = check_error(e.value, 404, "not_found_error")
    assert skill["id"] in body["error"]["message"], f"the 404 should name skill {skill['id']}: {body}"

    # An agent naming a version the skill does not have is refused the same way.
    other = create_skill(client)
    with pytest.raises(anthropic.NotFoundError) as e:
        client.beta.sessions.create(agent=skill_agent(client, other["id"], version=NOT_A_VERSION).id,
                                    environment_id=env.id)
    body = check_error(e.value, 404, "not_found_error")
    assert other["id"] in body["error"]["message"], f"the 404 should name skill {other['id']}: {body}"


# --- the namespace sandbox ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def namespace_gateway() -> Iterator[Any]:
    if shutil.which("bwrap") is None:
        pytest.skip("bwrap (bubblewrap) is not on PATH: the namespace sandbox cannot run here")
    with spawn_gateway("skills-namespace", api_key=False, GATEWAY_SANDBOX="namespace") as gw:
        yield gw


def test_namespace_sandbox_runs_the_skill_at_its_absolute_path(namespace_gateway, recorder: Recorder):
    with new_client(recorder, base_url=namespace_gateway.url) as c:
        skill = create_skill(c, display_name="Greeter")
        env = create_env(c, config=ISOLATED)
        assert raw(c.beta.environments.with_raw_response.retrieve(env.id), "environment")["config"][
            "provider"] == "namespace", "GATEWAY_SANDBOX=namespace should make namespace the default provider"
        s = skill_session(c, skill_agent(c, skill["id"]), env)

        script, manifest = f"/workspace/{SCRIPT}", f"/workspace/{MANIFEST}"
        out = tool_turn(c, s["id"], "bash", {
            "command": f"{script} world; {SCRIPT} again; stat -c '%n %a' {script} {manifest}; echo uid=$(id -u)"})
        lines = out.splitlines()
        assert "uid=65534" in lines, f"bash did not run in the namespace sandbox (uid 65534): {out}"
        assert "hello, world" in lines and "hello, again" in lines, out
        assert f"{script} 755" in lines and f"{manifest} 644" in lines, out
    assert namespace_gateway.proc.poll() is None, f"the gateway exited with {namespace_gateway.proc.returncode}"
