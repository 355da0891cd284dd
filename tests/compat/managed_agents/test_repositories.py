"""Repository resources of sessions (`resources=[{"type": "github_repository", ...}]` at create,
`client.beta.sessions.resources`: list, retrieve, update (the token), delete), through the
official SDK, cloned from a real git smart-HTTP server on loopback (`GitServer`: git's own
`git http-backend` CGI program behind a stdlib HTTP server, optionally requiring a token).

The gateway refuses loopback, private and link-local repository hosts unless
`environments.allow_private_repositories`, so the clones run on a gateway of their own
(`gw`); the default gateway shows the refusal. The clones are read back by the
agent's own bash tool, driven by the fake model (`tool:bash {...}`): `/workspace/X` is `X`
relative to the workspace, `/mnt/session/Y` is `mnt/session/Y` (the local sandbox).

A token must travel only as git's `Authorization: Basic base64("x-access-token:<token>")`
header: it is never shown by the API, nor written to the clone's `.git/config`, the gateway's
log, its database or anywhere else in its directory.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import threading
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import anthropic
import pytest
from anthropic.types.beta.sessions import BetaManagedAgentsGitHubRepositoryResource

from conftest import Recorder, create_agent, create_env, new_client, run_turn, spawn_gateway, types
from helpers import check_error, raw, raw_page
from test_files import by_id, listed_resources, tool_turn

PRIVATE_HOSTS = "loopback, private or link-local"
NOT_A_RESOURCE = "sesrsc_" + "0" * 22


# --- the git server ----------------------------------------------------------------------------


def git(cwd: Path, *args: str) -> str:
    """Runs git for a fixture, without any system or user configuration."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), "LANG": "C",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"git {args}: {done.stderr}"
    return done.stdout


@dataclass
class Repos:
    """`<root>/project.git`: `main` (README "v1", then "v2") and `feature` (README "feature")."""

    root: Path
    first: str  # the first commit on main (README "v1")


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> Repos:
    root = tmp_path_factory.mktemp("git-repos")
    work = root / "project-work"
    work.mkdir()
    git(work, "init", "--quiet", "--initial-branch=main")
    (work / "README").write_text("v1\n")
    git(work, "add", "README")
    git(work, "commit", "--quiet", "-m", "one")
    first = git(work, "rev-parse", "HEAD").strip()
    (work / "README").write_text("v2\n")
    git(work, "commit", "--quiet", "-am", "two")
    git(work, "checkout", "--quiet", "-b", "feature")
    (work / "README").write_text("feature\n")
    git(work, "commit", "--quiet", "-am", "three")
    git(work, "checkout", "--quiet", "main")
    git(root, "clone", "--quiet", "--bare", str(work), str(root / "project.git"))
    return Repos(root, first)


def basic(token: str) -> str:
    """The Authorization header the gateway's git sends for `token`."""
    return "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()


@dataclass
class GitRequest:
    method: str
    path: str
    authorization: str | None
    status: int = 0


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("transfer-encoding", "").lower() == "chunked":
        out = bytearray()
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(out)
            out += handler.rfile.read(size)
            handler.rfile.readline()
    length = int(handler.headers.get("content-length") or 0)
    return handler.rfile.read(length) if length else b""


class GitServer:
    """`git http-backend` serving the repositories under `root` at `http://127.0.0.1:<port>/<name>`;
    with `token`, only to requests carrying `basic(token)` (401 with a Basic challenge otherwise).
    Records every request and its Authorization header."""

    def __init__(self, name: str, root: Path, token: str | None) -> None:
        self.name, self.root, self.token = name, root, token
        self.seen: list[GitRequest] = []
        self.errors: list[str] = []  # http-backend's stderr, when it said anything
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                body = _read_body(self)
                path, _, query = self.path.partition("?")
                req = GitRequest(self.command, path, self.headers.get("authorization"))
                with server._lock:
                    server.seen.append(req)
                if server.token is not None and req.authorization != basic(server.token):
                    req.status = 401
                    self._answer(401, [("WWW-Authenticate", 'Basic realm="git"')], b"")
                    return
                req.status, headers, out = server.cgi(self, path, query, body)
                self._answer(req.status, headers, out)

            def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _any

            def log_message(self, *_: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name=f"git-{name}", daemon=True)
        self.thread.start()

    def cgi(self, h: BaseHTTPRequestHandler, path: str, query: str,
            body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1",
               "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_PROJECT_ROOT": str(self.root), "GIT_HTTP_EXPORT_ALL": "1",
               "REQUEST_METHOD": h.command, "PATH_INFO": path, "QUERY_STRING": query,
               "CONTENT_TYPE": h.headers.get("content-type", ""), "CONTENT_LENGTH": str(len(body)),
               "HTTP_CONTENT_ENCODING": h.headers.get("content-encoding", ""),
               "GIT_PROTOCOL": h.headers.get("git-protocol", ""), "REMOTE_ADDR": "127.0.0.1"}
        done = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, timeout=60)
        if done.stderr:
            with self._lock:
                self.errors.append(done.stderr.decode("utf-8", "replace"))
        out = done.stdout
        end, gap = out.find(b"\r\n\r\n"), 4
        if end < 0:
            end, gap = out.find(b"\n\n"), 2
        if end < 0:
            return 502, [], b"git http-backend printed no CGI headers"
        status, headers = 200, []
        for line in out[:end].decode("latin-1").splitlines():
            name, sep, value = line.partition(":")
            if not sep:
                continue
            if name.strip().lower() == "status":
                status = int(value.split()[0])
            else:
                headers.append((name.strip(), value.strip()))
        return status, headers, out[end + gap:]

    def url(self, repo: str = "project.git") -> str:
        return f"http://127.0.0.1:{self.port}/{repo}"

    def requests(self) -> list[GitRequest]:
        with self._lock:
            return list(self.seen)

    def authorizations(self) -> set[str]:
        return {r.authorization for r in self.requests() if r.authorization is not None}

    def failure_logs(self) -> list[tuple[str, str]]:
        lines = [repr(r) for r in self.requests()] + [f"http-backend: {e}" for e in self.errors]
        return [(f"git server {self.name} ({self.url()})", "\n".join(lines) or "(no requests)")]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class GitServers:
    def __init__(self, repos: Repos) -> None:
        self.repos = repos
        self.started: list[GitServer] = []

    def start(self, token: str | None = None) -> GitServer:
        self.started.append(GitServer(f"g{len(self.started) + 1}", self.repos.root, token))
        return self.started[-1]

    def failure_logs(self) -> list[tuple[str, str]]:
        return [log for s in self.started for log in s.failure_logs()]

    def close(self) -> None:
        for s in self.started:
            s.close()


@pytest.fixture
def git_servers(repos: Repos) -> Iterator[GitServers]:
    pool = GitServers(repos)
    try:
        yield pool
    finally:
        pool.close()


# --- the gateway -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gw() -> Iterator[Any]:
    """The gateway that may clone from loopback (the git servers here)."""
    with spawn_gateway("repos", api_key=False, GATEWAY_ENVIRONMENTS__ALLOW_PRIVATE_REPOSITORIES="true") as g:
        yield g


@pytest.fixture
def pclient(gw: Any, recorder: Recorder) -> Iterator[anthropic.Anthropic]:
    with new_client(recorder, base_url=gw.url) as c:
        yield c


def repository(url: str, mount_path: str | None = None, checkout: dict | None = None,
               token: str | None = None) -> dict:
    r: dict[str, Any] = {"type": "github_repository", "url": url}
    if checkout is not None:
        r["checkout"] = checkout
    if mount_path is not None:
        r["mount_path"] = mount_path
    if token is not None:
        r["authorization_token"] = token
    return r


def shown(r: dict) -> tuple:
    """What a repository resource shows of what was given."""
    return r["type"], r["url"], r["mount_path"], r["checkout"]


def create_session(c: anthropic.Anthropic, resources: list[dict]) -> tuple[dict, str]:
    """A session on a fresh agent and environment mounting `resources`: its raw body and text."""
    agent, env = create_agent(c), create_env(c)
    r = c.beta.sessions.with_raw_response.create(agent=agent.id, environment_id=env.id, resources=resources)
    body = raw(r, "session")
    assert body["environment_id"] == env.id
    return body, r.text()


def failed_turn(c: anthropic.Anthropic, session_id: str, resource_id: str, why: str) -> str:
    """A turn that fails before the model runs, with one session.error naming `resource_id` and
    saying `why`; returns the error's message."""
    w = run_turn(c, session_id, "hello")
    kinds = types(w.events)
    errors = w.of_type("session.error")
    assert len(errors) == 1, kinds
    message = errors[0].error.message
    assert resource_id in message, f"the error should name {resource_id}: {message}"
    assert why in message, f"the error should say {why!r}: {message}"
    assert "span.model_request_start" not in kinds, f"the model ran without the repository: {kinds}"
    assert kinds[-2:] == ["session.error", "session.status_idle"], kinds
    return message


def listing(out: str) -> list[str]:
    """The names `ls -A` printed."""
    return out.split()


def secrets_in(text: str | bytes, *tokens: str) -> list[str]:
    """Which of `tokens` (or their Authorization header forms) occur in `text`."""
    data = text.encode() if isinstance(text, str) else text
    found = []
    for t in tokens:
        for form in (t, basic(t).removeprefix("Basic ")):
            if form.encode() in data:
                found.append(form)
    return found


def gateway_files_holding(gw: Any, *tokens: str) -> list[str]:
    """Files anywhere in the gateway's directory (its log, its database, the workspaces and
    the clones in them) that hold one of `tokens`."""
    hits = []
    for dirpath, _dirs, files in os.walk(gw.workdir):
        for name in files:
            path = os.path.join(dirpath, name)
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            if secrets_in(data, *tokens):
                hits.append(os.path.relpath(path, gw.workdir))
    return hits


def staged(gw: Any) -> list[str]:
    """What is left in the gateway's private clone staging directory (beside the workspaces,
    made by the first checkout)."""
    staging = Path(gw.workdir) / "data" / "workspaces" / ".staging"
    assert staging.is_dir(), f"no staging directory at {staging}"
    return sorted(os.listdir(staging))


def at(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


# --- refused URLs and hosts --------------------------------------------------------------------


def test_urls_with_credentials_or_other_schemes_are_refused_at_create(client):
    agent, env = create_agent(client), create_env(client)
    for url in ("http://u:p@127.0.0.1:1/x.git", "https://x-access-token:t0k@github.com/o/r.git",
                "file:///etc/x.git", "ext::sh -c id"):
        with pytest.raises(anthropic.BadRequestError) as e:
            client.beta.sessions.create(agent=agent.id, environment_id=env.id,
                                        resources=[repository(url, "/workspace/x")])
        check_error(e.value, 400, "invalid_request_error")


def test_loopback_repository_is_refused_at_create_on_the_default_gateway(client, git_servers):
    server = git_servers.start()
    agent, env = create_agent(client), create_env(client)
    with pytest.raises(anthropic.BadRequestError) as e:
        client.beta.sessions.create(agent=agent.id, environment_id=env.id,
                                    resources=[repository(server.url(), "/workspace/src/main")])
    assert PRIVATE_HOSTS in check_error(e.value, 400, "invalid_request_error")["error"]["message"]

    # Nor can it be added later; the session runs, and nothing of it reaches the workspace.
    s, _ = create_session(client, [])
    with pytest.raises(anthropic.BadRequestError) as e:
        # The SDK's `resources.add` types files only; the API takes any resource.
        client.post(f"/v1/sessions/{s['id']}/resources", cast_to=object,
                    body=repository(server.url(), "/workspace/src/main"))
    check_error(e.value, 400, "invalid_request_error")
    assert "src" not in listing(tool_turn(client, s["id"], "bash", {"command": "ls -A"}))
    assert server.requests() == [], "git reached a refused host"


# --- clones ------------------------------------------------------------------------------------


def test_repositories_are_cloned_at_their_branch_or_commit_before_the_model_runs(gw, pclient, repos, git_servers):
    token, rotated = "tok-" + secrets.token_hex(12), "rot-" + secrets.token_hex(12)
    server = git_servers.start()  # open: the token must still travel, and only for its own clone
    url = server.url()
    given = [
        repository(url, "/workspace/main"),
        repository(url, "/workspace/feature", {"type": "branch", "name": "feature"}, token),
        repository(url, "/mnt/session/old", {"type": "commit", "sha": repos.first}),
    ]
    s, text = create_session(pclient, given)
    assert not secrets_in(text, token), "the create response shows the token"
    resources = s["resources"]
    assert [shown(r) for r in resources] == [
        ("github_repository", url, "/workspace/main", None),
        ("github_repository", url, "/workspace/feature", {"type": "branch", "name": "feature"}),
        ("github_repository", url, "/mnt/session/old", {"type": "commit", "sha": repos.first}),
    ], resources
    assert len({r["id"] for r in resources}) == 3, resources
    assert listed_resources(pclient, s["id"]) == by_id(resources)
    for r in resources:
        got = pclient.beta.sessions.resources.with_raw_response.retrieve(r["id"], session_id=s["id"])
        assert raw(got, "session_resource") == r
        assert not secrets_in(got.text(), token)
    assert server.requests() == [], "nothing is cloned before the first turn"

    command = ("cat main/README feature/README mnt/session/old/README; git -C mnt/session/old rev-parse HEAD; "
               "cat feature/.git/config")
    out = tool_turn(pclient, s["id"], "bash", {"command": command})
    assert f"v2\nfeature\nv1\n{repos.first}\n" in out, out
    assert not secrets_in(out, token) and "extraheader" not in out.lower(), f"feature/.git/config: {out}"
    assert url in out, f"the remote is the URL as given: {out}"

    # The token went as the Basic header, and only with the clone it belongs to.
    assert server.authorizations() == {basic(token)}, server.requests()
    assert any(r.authorization is None for r in server.requests()), "the other clones carried a token"

    # Rotating the token: the resource comes back, without it.
    before = {r["id"]: r for r in resources}[resources[1]["id"]]
    r = pclient.beta.sessions.resources.with_raw_response.update(
        before["id"], session_id=s["id"], authorization_token=rotated)
    after = raw(r, "session_resource")
    assert isinstance(r.parse(), BetaManagedAgentsGitHubRepositoryResource)
    assert not secrets_in(r.text(), token, rotated), "the update response shows a token"
    assert {k: v for k, v in after.items() if k != "updated_at"} == {
        k: v for k, v in before.items() if k != "updated_at"}, (before, after)
    assert at(after["updated_at"]) >= at(before["updated_at"]), (before, after)
    assert by_id(listed_resources(pclient, s["id"])) == by_id([after if x["id"] == after["id"] else x
                                                               for x in resources])
    with pytest.raises(anthropic.NotFoundError) as e:
        pclient.beta.sessions.resources.update(NOT_A_RESOURCE, session_id=s["id"], authorization_token=rotated)
    check_error(e.value, 404, "not_found_error")

    # The next turn finds the clones in place (none fetched again).
    seen = len(server.requests())
    out = tool_turn(pclient, s["id"], "bash", {"command": "cat main/README feature/README"})
    assert "v2\nfeature\n" in out, out
    assert len(server.requests()) == seen, "a repository already in the workspace was fetched again"

    # The token is in no event, nowhere in the gateway's directory (its log, its database, the
    # clones), and the log did record the checkouts.
    events = raw_page(pclient.beta.sessions.events.with_raw_response.list(s["id"], limit=1000), "event")
    assert not secrets_in(json.dumps(events), token, rotated), "an event holds the token"
    assert gateway_files_holding(gw, token, rotated) == [], "the token is on the gateway's disk"
    log = Path(gw.log_path).read_text("utf-8", "replace")
    assert log.count("repository checked out") >= 3, "the log does not record the checkouts"
    assert staged(gw) == [], "clones were left in staging"


def test_the_default_mount_path_is_the_repository_name(pclient, git_servers):
    server = git_servers.start()
    s, _ = create_session(pclient, [repository(server.url()), repository("https://example.com/o/tools")])
    assert [shown(r) for r in s["resources"]] == [
        ("github_repository", server.url(), "/workspace/project", None),
        ("github_repository", "https://example.com/o/tools", "/workspace/tools", None),
    ], s["resources"]
    raw(pclient.beta.sessions.resources.with_raw_response.delete(s["resources"][1]["id"], session_id=s["id"]),
        "session_resource_deleted")
    assert "v2" in tool_turn(pclient, s["id"], "bash", {"command": "cat project/README"})


# --- tokens refused ----------------------------------------------------------------------------


def test_a_wrong_token_fails_the_turn_and_leaves_nothing(gw, pclient, git_servers):
    right, wrong = "right-" + secrets.token_hex(12), "wrong-" + secrets.token_hex(12)
    server = git_servers.start(token=right)
    s, _ = create_session(pclient, [repository(server.url(), "/workspace/src/locked", token=wrong)])
    (res,) = s["resources"]

    message = failed_turn(pclient, s["id"], res["id"], "could not fetch the repository from 127.0.0.1")
    assert not secrets_in(message, right, wrong), f"the error shows a token: {message}"
    assert server.authorizations() == {basic(wrong)}, server.requests()
    assert all(r.status == 401 for r in server.requests()), server.requests()
    assert staged(gw) == [], "the failed clone was left in staging"

    raw(pclient.beta.sessions.resources.with_raw_response.delete(res["id"], session_id=s["id"]),
        "session_resource_deleted")
    assert "src" not in listing(tool_turn(pclient, s["id"], "bash", {"command": "ls -A"})), (
        "the failed checkout left a directory in the workspace")
    assert gateway_files_holding(gw, right, wrong) == [], "a token is on the gateway's disk"


def test_a_rotated_token_is_used_by_the_next_checkout(gw, pclient, git_servers):
    right = "right-" + secrets.token_hex(12)
    server = git_servers.start(token=right)
    s, _ = create_session(pclient, [repository(server.url(), "/workspace/locked")])
    (res,) = s["resources"]

    failed_turn(pclient, s["id"], res["id"], "could not fetch the repository from 127.0.0.1")
    assert server.requests() and server.authorizations() == set(), server.requests()

    updated = raw(pclient.beta.sessions.resources.with_raw_response.update(
        res["id"], session_id=s["id"], authorization_token=right), "session_resource")
    assert shown(updated) == shown(res) and updated["id"] == res["id"], (res, updated)
    out = tool_turn(pclient, s["id"], "bash", {"command": "cat locked/README; git -C locked branch --show-current"})
    assert "v2\nmain\n" in out, out
    assert server.authorizations() == {basic(right)}, server.requests()
    assert gateway_files_holding(gw, right) == [], "the token is on the gateway's disk"
