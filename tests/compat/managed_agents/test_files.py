"""Files (`client.beta.files`: upload, list, retrieve_metadata, download, delete) and the file
resources of sessions (`resources=[{"type": "file", ...}]` at create,
`client.beta.sessions.resources`: list, retrieve, add, delete), through the official SDK.

A mounted file is read back by the agent's own tools, driven by the fake model
(`tool:read {...}`, `tool:bash {...}`): `/workspace/X` is `X` relative to the workspace (the
tools' working directory) and `/mnt/session/Y` is `mnt/session/Y`, so relative paths work on
every provider; the `namespace` sandbox (bubblewrap) shows the absolute paths too. The upload
limit (`files.max_bytes`) and the `namespace` sandbox each get a gateway of their own
(`spawn_gateway`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

import anthropic
import pytest

from conftest import Recorder, create_agent, create_env, new_client, run_turn, spawn_gateway, types
from helpers import check_error, raw, raw_page, text_of

TEXT = "first line: notes for the agent\nsecond line: h\u00e9llo w\u00f6rld \u2713\n".encode()
NOTES_PATH = "/workspace/data/notes.txt"
NOT_A_FILE = "file_" + "0" * 22
MAX_BYTES = 1024  # GATEWAY_FILES__MAX_BYTES of the small-limit gateway
ISOLATED = {"type": "cloud", "networking": {"type": "limited"}}  # no network: the namespace sandbox needs no slirp4netns


def blob(size: int = 4096) -> bytes:
    """Random bytes that surely hold a NUL, a 0xff, a lone newline and a CR."""
    data = bytearray(os.urandom(size))
    data[0:4] = b"\x00\xff\n\r"
    data[-2:] = b"\x80\x00"
    return bytes(data)


def default_mount(file_id: str) -> str:
    return f"/mnt/session/uploads/{file_id}"


def file_resource(file_id: str, mount_path: str | None = None) -> dict:
    r: dict[str, Any] = {"type": "file", "file_id": file_id}
    if mount_path is not None:
        r["mount_path"] = mount_path
    return r


# --- fixtures ----------------------------------------------------------------------------------


def uploader(client: anthropic.Anthropic) -> Callable[..., dict]:
    """`upload(name, data, mime)`: `files.upload` through `with_raw_response`; checks the raw
    metadata against what was sent and returns it."""

    def upload(name: str, data: bytes, mime: str = "text/plain") -> dict:
        before = datetime.now(timezone.utc)
        body = raw(client.beta.files.with_raw_response.upload(file=(name, data, mime)), "file")
        assert body["filename"] == name, body
        assert body["mime_type"] == mime, body
        assert body["size_bytes"] == len(data), body
        assert body["downloadable"] is True, body
        created = datetime.fromisoformat(body["created_at"].replace("Z", "+00:00"))
        assert abs((created - before).total_seconds()) < 60, f"created_at {body['created_at']} is not now ({before})"
        return body

    return upload


@pytest.fixture
def upload(client: anthropic.Anthropic) -> Callable[..., dict]:
    return uploader(client)


def session_with(client: anthropic.Anthropic, resources: list[dict], env: Any = None) -> dict:
    """A session on a fresh agent (toolset on) mounting `resources`; returns its raw body."""
    agent = create_agent(client)
    env = env if env is not None else create_env(client)
    r = client.beta.sessions.with_raw_response.create(agent=agent.id, environment_id=env.id, resources=resources)
    body = raw(r, "session")
    assert body["environment_id"] == env.id
    return body


def check_mounts(body: dict, expected: list[tuple[str, str]]) -> list[dict]:
    """`body["resources"]` are file resources with (file_id, mount_path) `expected`, in order."""
    got = body["resources"]
    assert [(r["type"], r["file_id"], r["mount_path"]) for r in got] == [("file", f, m) for f, m in expected], got
    assert len({r["id"] for r in got}) == len(got), f"resource ids repeat: {got}"
    return got


def by_id(resources: list[dict]) -> list[dict]:
    """Resources in a canonical order (the contract orders neither view)."""
    return sorted(resources, key=lambda r: r["id"])


def listed_resources(client: anthropic.Anthropic, session_id: str) -> list[dict]:
    """Every resource of the session, raw and checked, walking next_page; sorted by id."""
    out: list[dict] = []
    page = None
    while True:
        kwargs = {"page": page} if page else {}
        body = raw_page(client.beta.sessions.resources.with_raw_response.list(session_id, **kwargs), "session_resource")
        out.extend(body["data"])
        page = body["next_page"]
        if page is None:
            assert len({r["id"] for r in out}) == len(out), f"a resource listed twice: {out}"
            return by_id(out)


def listed_files(client: anthropic.Anthropic, limit: int | None = None) -> list[dict]:
    """Every file, raw and checked, walking next_page; each page at most `limit` long."""
    out: list[dict] = []
    page = None
    while True:
        kwargs: dict[str, Any] = {"page": page} if page else {}
        if limit is not None:
            kwargs["limit"] = limit
        body = raw_page(client.beta.files.with_raw_response.list(**kwargs), "file")
        if limit is not None:
            assert len(body["data"]) <= limit, f"a page of {len(body['data'])} files for limit={limit}"
        out.extend(body["data"])
        page = body["next_page"]
        if page is None:
            return out


def tool_turn(client: anthropic.Anthropic, session_id: str, tool: str, payload: dict) -> str:
    """One turn of the fake model calling built-in `tool` with `payload`; the result's text
    (asserted not an error)."""
    w = run_turn(client, session_id, f"tool:{tool} {json.dumps(payload)}")
    kinds = types(w.events)
    uses, results = w.of_type("agent.tool_use"), w.of_type("agent.tool_result")
    assert len(uses) == 1 and uses[0].name == tool and uses[0].input == payload, kinds
    assert len(results) == 1 and results[0].tool_use_id == uses[0].id, kinds
    text = text_of(results[0])
    assert not results[0].is_error, f"{tool} {payload} failed: {text}"
    assert "session.error" not in kinds, kinds
    assert w.events[-1].type == "session.status_idle" and w.events[-1].stop_reason.type == "end_turn", kinds
    return text


def assert_read_shows(text: str, data: bytes) -> None:
    """The read tool numbers its lines: every line of `data` is in its output."""
    for line in data.decode().splitlines():
        assert line in text, f"read output lacks {line!r}:\n{text}"


def sha256_line(digest: str, path: str) -> str:
    return f"{digest}  {path}"


# --- the Files API -----------------------------------------------------------------------------


def test_upload_retrieve_download_delete(client, upload):
    text = upload("notes.txt", TEXT, "text/plain")
    data = blob()
    binary = upload("blob.bin", data, "application/octet-stream")
    assert text["id"] != binary["id"]

    for meta in (text, binary):
        assert raw(client.beta.files.with_raw_response.retrieve_metadata(meta["id"]), "file") == meta
        # The SDK object reads the same.
        parsed = client.beta.files.retrieve_metadata(meta["id"])
        assert (parsed.id, parsed.filename, parsed.size_bytes, parsed.downloadable) == (
            meta["id"], meta["filename"], meta["size_bytes"], True)
    assert client.beta.files.download(text["id"]).read() == TEXT
    assert client.beta.files.download(binary["id"]).read() == data, "download changed the binary's bytes"

    deleted = raw(client.beta.files.with_raw_response.delete(text["id"]), "file_deleted")
    assert deleted == {"id": text["id"], "type": "file_deleted"}, deleted
    with pytest.raises(anthropic.NotFoundError) as e:
        client.beta.files.retrieve_metadata(text["id"])
    check_error(e.value, 404, "not_found_error")
    with pytest.raises(anthropic.NotFoundError) as e:
        client.beta.files.download(text["id"])
    check_error(e.value, 404, "not_found_error")
    with pytest.raises(anthropic.NotFoundError) as e:
        client.beta.files.delete(text["id"])
    check_error(e.value, 404, "not_found_error")
    ids = [f["id"] for f in listed_files(client)]
    assert text["id"] not in ids and binary["id"] in ids
    # The other file is untouched.
    assert client.beta.files.download(binary["id"]).read() == data


def test_list_is_newest_first_in_cursor_pages(client, upload):
    made = [upload(f"page-{i}.txt", f"page {i}\n".encode()) for i in range(3)]
    newest_first = [m["id"] for m in reversed(made)]
    first = raw_page(client.beta.files.with_raw_response.list(limit=2), "file")
    assert [f["id"] for f in first["data"]] == newest_first[:2], first["data"]
    assert first["next_page"] is not None, "two of at least three files: there is a next page"
    second = raw_page(client.beta.files.with_raw_response.list(limit=2, page=first["next_page"]), "file")
    assert second["data"] and second["data"][0]["id"] == newest_first[2], second["data"]
    # Walking every page: no file twice, ours first and newest first; the SDK's auto-pagination agrees.
    walked = [f["id"] for f in listed_files(client, limit=2)]
    assert len(walked) == len(set(walked)), f"a file listed twice: {walked}"
    assert walked[:3] == newest_first, walked
    assert [f.id for f in client.beta.files.list(limit=2)] == walked
    listed = {f["id"]: f for f in listed_files(client)}
    for m in made:
        assert listed[m["id"]] == m, "a listed file reads as its upload did"


@pytest.fixture(scope="module")
def small_gateway() -> Iterator[Any]:
    with spawn_gateway("files-small", api_key=False, GATEWAY_FILES__MAX_BYTES=str(MAX_BYTES)) as gw:
        yield gw


def test_upload_over_the_limit_is_413(small_gateway, recorder: Recorder):
    with new_client(recorder, base_url=small_gateway.url) as c:
        upload = uploader(c)
        for size in (2 * MAX_BYTES, MAX_BYTES + 1):
            with pytest.raises(anthropic.APIStatusError) as e:
                c.beta.files.upload(file=("big.bin", b"x" * size, "application/octet-stream"))
            assert isinstance(e.value, anthropic.ContentTooLargeError), type(e.value)
            check_error(e.value, 413, "request_too_large")
        fits = upload("fits.bin", b"y" * 1000, "application/octet-stream")
        full = upload("full.bin", b"z" * MAX_BYTES, "application/octet-stream")
        assert c.beta.files.download(full["id"]).read() == b"z" * MAX_BYTES
        # Nothing of the refused uploads was kept.
        assert [f["id"] for f in listed_files(c)] == [full["id"], fits["id"]]
    assert small_gateway.proc.poll() is None, f"the gateway exited with {small_gateway.proc.returncode}"


# --- session resources -------------------------------------------------------------------------


def test_session_mounts_files_and_tools_read_them(client, upload):
    text = upload("notes.txt", TEXT, "text/plain")
    data = blob()
    binary = upload("blob.bin", data, "application/octet-stream")
    s = session_with(client, [file_resource(text["id"], NOTES_PATH), file_resource(binary["id"])])
    mounts = check_mounts(s, [(text["id"], NOTES_PATH), (binary["id"], default_mount(binary["id"]))])

    # The resources API shows the same resources.
    assert listed_resources(client, s["id"]) == by_id(mounts)
    for m in mounts:
        got = raw(client.beta.sessions.resources.with_raw_response.retrieve(m["id"], session_id=s["id"]),
                  "session_resource")
        assert got == m
    assert raw(client.beta.sessions.with_raw_response.retrieve(s["id"]), "session")["resources"] == mounts

    # The tools see both files, relative to the workspace (the local sandbox).
    assert_read_shows(tool_turn(client, s["id"], "read", {"file_path": "data/notes.txt"}), TEXT)
    uploaded = f"mnt/session/uploads/{binary['id']}"
    out = tool_turn(client, s["id"], "bash", {"command": f"sha256sum data/notes.txt {uploaded}"})
    assert sha256_line(hashlib.sha256(TEXT).hexdigest(), "data/notes.txt") in out, out
    assert sha256_line(hashlib.sha256(data).hexdigest(), uploaded) in out, out
    # The upload itself is unchanged.
    assert client.beta.files.download(binary["id"]).read() == data


def test_resources_added_after_a_turn_are_there_next_turn(client, upload):
    text = upload("notes.txt", TEXT, "text/plain")
    s = session_with(client, [file_resource(text["id"], NOTES_PATH)])
    first = check_mounts(s, [(text["id"], NOTES_PATH)])
    assert_read_shows(tool_turn(client, s["id"], "read", {"file_path": "data/notes.txt"}), TEXT)

    later_text = b"added after the first turn\n"
    later = upload("later.txt", later_text, "text/plain")
    data = blob(2048)
    extra = upload("extra.bin", data, "application/octet-stream")
    added = raw(client.beta.sessions.resources.with_raw_response.add(
        s["id"], type="file", file_id=later["id"], mount_path="/workspace/later/added.txt"), "session_resource")
    assert (added["file_id"], added["mount_path"]) == (later["id"], "/workspace/later/added.txt"), added
    defaulted = raw(client.beta.sessions.resources.with_raw_response.add(s["id"], type="file", file_id=extra["id"]),
                    "session_resource")
    assert (defaulted["file_id"], defaulted["mount_path"]) == (extra["id"], default_mount(extra["id"])), defaulted
    assert listed_resources(client, s["id"]) == by_id(first + [added, defaulted])
    assert by_id(raw(client.beta.sessions.with_raw_response.retrieve(s["id"]), "session")["resources"]) == by_id(
        first + [added, defaulted])

    assert_read_shows(tool_turn(client, s["id"], "read", {"file_path": "later/added.txt"}), later_text)
    uploaded = f"mnt/session/uploads/{extra['id']}"
    out = tool_turn(client, s["id"], "bash", {"command": f"sha256sum {uploaded}"})
    assert sha256_line(hashlib.sha256(data).hexdigest(), uploaded) in out, out

    # Deleting a resource: its confirmation, then it is gone from both views.
    gone = raw(client.beta.sessions.resources.with_raw_response.delete(added["id"], session_id=s["id"]),
               "session_resource_deleted")
    assert gone == {"id": added["id"], "type": "session_resource_deleted"}, gone
    with pytest.raises(anthropic.NotFoundError) as e:
        client.beta.sessions.resources.retrieve(added["id"], session_id=s["id"])
    check_error(e.value, 404, "not_found_error")
    assert listed_resources(client, s["id"]) == by_id(first + [defaulted])
    assert by_id(raw(client.beta.sessions.with_raw_response.retrieve(s["id"]), "session")["resources"]) == by_id(
        first + [defaulted])


def test_unknown_files_and_bad_mount_paths_are_refused(client, upload):
    text = upload("notes.txt", TEXT, "text/plain")
    agent, env = create_agent(client), create_env(client)

    with pytest.raises(anthropic.NotFoundError) as e:
        client.beta.sessions.create(agent=agent.id, environment_id=env.id, resources=[file_resource(NOT_A_FILE)])
    check_error(e.value, 404, "not_found_error")
    bad = ["relative/notes.txt", "/etc/notes.txt", "/tmp/notes.txt", "/workspace/../etc/passwd",
           "/mnt/session/../../etc/passwd", "/workspace/data/../../etc/passwd", "/mnt/other/notes.txt"]
    for path in bad:
        with pytest.raises(anthropic.BadRequestError) as e:
            client.beta.sessions.create(agent=agent.id, environment_id=env.id,
                                        resources=[file_resource(text["id"], path)])
        check_error(e.value, 400, "invalid_request_error")

    s = session_with(client, [], env=env)
    with pytest.raises(anthropic.NotFoundError) as e:
        client.beta.sessions.resources.add(s["id"], type="file", file_id=NOT_A_FILE)
    check_error(e.value, 404, "not_found_error")
    for path in bad:
        with pytest.raises(anthropic.BadRequestError) as e:
            client.beta.sessions.resources.add(s["id"], type="file", file_id=text["id"], mount_path=path)
        check_error(e.value, 400, "invalid_request_error")
    assert listed_resources(client, s["id"]) == [], "a refused add left a resource behind"


def test_a_mounted_file_is_deleted_only_after_its_session(client, upload):
    f = upload("notes.txt", TEXT, "text/plain")
    s = session_with(client, [file_resource(f["id"], NOTES_PATH)])
    assert_read_shows(tool_turn(client, s["id"], "read", {"file_path": "data/notes.txt"}), TEXT)

    with pytest.raises(anthropic.ConflictError) as e:
        client.beta.files.delete(f["id"])
    body = check_error(e.value, 409, "conflict_error")
    assert s["id"] in body["error"]["message"], f"the 409 should name session {s['id']}: {body}"
    # Still there, whole.
    assert raw(client.beta.files.with_raw_response.retrieve_metadata(f["id"]), "file") == f
    assert client.beta.files.download(f["id"]).read() == TEXT

    raw(client.beta.sessions.with_raw_response.delete(s["id"]), "session_deleted")
    assert raw(client.beta.files.with_raw_response.delete(f["id"]), "file_deleted")["id"] == f["id"]
    with pytest.raises(anthropic.NotFoundError) as e:
        client.beta.files.retrieve_metadata(f["id"])
    check_error(e.value, 404, "not_found_error")


def test_a_file_is_held_by_every_session_that_mounts_it(client, upload):
    f = upload("shared.txt", TEXT, "text/plain")
    s1 = session_with(client, [file_resource(f["id"])])
    s2 = session_with(client, [file_resource(f["id"], NOTES_PATH)])
    raw(client.beta.sessions.with_raw_response.delete(s1["id"]), "session_deleted")
    with pytest.raises(anthropic.ConflictError) as e:
        client.beta.files.delete(f["id"])
    body = check_error(e.value, 409, "conflict_error")
    assert s2["id"] in body["error"]["message"], f"the 409 should name session {s2['id']}: {body}"
    # Unmounting it from the live session frees it.
    (resource,) = s2["resources"]
    raw(client.beta.sessions.resources.with_raw_response.delete(resource["id"], session_id=s2["id"]),
        "session_resource_deleted")
    assert raw(client.beta.files.with_raw_response.delete(f["id"]), "file_deleted")["id"] == f["id"]


# --- the namespace sandbox ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def namespace_gateway() -> Iterator[Any]:
    if shutil.which("bwrap") is None:
        pytest.skip("bwrap (bubblewrap) is not on PATH: the namespace sandbox cannot run here")
    with spawn_gateway("files-namespace", api_key=False, GATEWAY_SANDBOX="namespace") as gw:
        yield gw


def test_namespace_sandbox_shows_absolute_mount_paths(namespace_gateway, recorder: Recorder):
    with new_client(recorder, base_url=namespace_gateway.url) as c:
        upload = uploader(c)
        text = upload("notes.txt", TEXT, "text/plain")
        data = blob()
        binary = upload("blob.bin", data, "application/octet-stream")
        env = create_env(c, config=ISOLATED)
        assert raw(c.beta.environments.with_raw_response.retrieve(env.id), "environment")["config"][
            "provider"] == "namespace", "GATEWAY_SANDBOX=namespace should make namespace the default provider"
        s = session_with(c, [file_resource(text["id"], NOTES_PATH), file_resource(binary["id"])], env=env)
        check_mounts(s, [(text["id"], NOTES_PATH), (binary["id"], default_mount(binary["id"]))])

        assert_read_shows(tool_turn(c, s["id"], "read", {"file_path": NOTES_PATH}), TEXT)
        assert_read_shows(tool_turn(c, s["id"], "read", {"file_path": "data/notes.txt"}), TEXT)
        absolute, relative = default_mount(binary["id"]), f"mnt/session/uploads/{binary['id']}"
        out = tool_turn(c, s["id"], "bash",
                        {"command": f"sha256sum {NOTES_PATH} {absolute} {relative}; echo uid=$(id -u)"})
        assert "uid=65534" in out, f"bash did not run in the namespace sandbox (uid 65534): {out}"
        assert sha256_line(hashlib.sha256(TEXT).hexdigest(), NOTES_PATH) in out, out
        digest = hashlib.sha256(data).hexdigest()
        assert sha256_line(digest, absolute) in out, out
        assert sha256_line(digest, relative) in out, out
        assert c.beta.files.download(binary["id"]).read() == data
