"""Security suite for `tools.local_hub`, over real HTTP on 127.0.0.1 (issue 16).

The server is started by the README for anyone to use, so it must not be turnable against its host:
  - no request can make it read or reveal a file outside its root (path traversal in every field that
    names something: repo ids, file paths, LFS oids, revisions; plain and URL-encoded);
  - no request data reaches a response header with a line break in it (header injection);
  - bodies are judged by their headers before a byte is read: too large -> 413, malformed -> 400,
    a write without a token -> 401; a body that never arrives times out and frees its thread;
  - wrong-shaped JSON is a 400, never a 500;
  - a bounded number of connections is served at once, and the server stays responsive beyond it;
  - a fuzz of request lines and bodies never gets a 500 or a byte of a file outside the root;
  - (issue 25) an LFS object is reachable only from the repository it was uploaded to, and no request that
    names one tells whether another repository holds it; upload URLs take a byte count under the limit and
    expire; bad file names (control, bidi and line-separator characters, over-long names, a file beside a
    folder of its name, NFC/NFD twins) are refused in one line with the reason; every stage of a request has
    a deadline, slow clients cannot keep others out, and reads never wait for a writer's lock;
  - (issue 51) what `minibert push` sends it: nothing the user did not ask for. Publishing is an allow-list (the
    files a model repository of the format consists of; scripts, bytecode, notes and, in BERT format, code are
    left out and named in one line), and the token is searched in every path and every text the upload carries.

Malformed requests go through raw sockets (no client library would send them); the tables are the suite.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import logging
import re
import select
import socket
import threading
import time
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools.local_hub import LocalHub

pytestmark = pytest.mark.slow(seconds=91)  # real jobs end to end: not in the quick tier (-m "not slow")

TOKEN = "hf_securitytest_0123456789abcdef"
BOB_TOKEN = "hf_securitytest_bob_456789abcdef"  # a second account, for what one user can do to another's repos
CANARY = b"CANARY-outside-the-hub-root-7f3a"
LIMITS = {"max_body_size": 1 << 20, "max_lfs_size": 1 << 25, "max_connections": 8, "request_timeout": 1.0}
SECRET = b"alice's private weights " * 20  # an LFS object in alice's private repository
README = b"---\nlicense: apache-2.0\n---\n# r1\n"


# ---------------------------------------------------------------------------------------------
# A server with one public repository (alice/r1: config.json, README.md, an LFS file) and a canary
# file beside its root.
# ---------------------------------------------------------------------------------------------


def _file_op(path: str, content: bytes) -> dict:
    return {
        "key": "file",
        "value": {"path": path, "content": base64.b64encode(content).decode(), "encoding": "base64"},
    }


def _commit_body(*operations: dict, header: dict | None = None) -> bytes:
    lines = [{"key": "header", "value": header if header is not None else {"summary": "s"}}, *operations]
    return "\n".join(json.dumps(line) for line in lines).encode()


def _lfs_op(path: str, oid: str, size: int | None) -> dict:
    return {"key": "lfsFile", "value": {"path": path, "algo": "sha256", "oid": oid, "size": size}}


def _batch(hub: LocalHub, repo: str, objects: list[dict], token: str = TOKEN) -> Answer:
    payload = json.dumps({"operation": "upload", "objects": objects}).encode()
    return request(hub, "POST", f"/{repo}.git/info/lfs/objects/batch", payload, token=token)


def _upload_url(hub: LocalHub, repo: str, data: bytes, token: str = TOKEN) -> str:
    """A fresh upload URL (path only) for `data` in `repo`."""
    batch = _batch(hub, repo, [{"oid": hashlib.sha256(data).hexdigest(), "size": len(data)}], token=token)
    return json.loads(batch.body)["objects"][0]["actions"]["upload"]["href"].removeprefix(hub.endpoint)


def _upload(hub: LocalHub, repo: str, data: bytes, token: str = TOKEN) -> str:
    """Upload `data` as an LFS object of `repo` (as the client does: batch, then PUT); returns its oid."""
    assert request(hub, "PUT", _upload_url(hub, repo, data, token), data, auth=False).status == 200
    return hashlib.sha256(data).hexdigest()


def _populate(hub: LocalHub) -> str:
    """alice/r1 with config.json, README.md and an LFS file; returns the LFS oid. (Raw requests: fast.)"""
    assert request(hub, "POST", "/api/repos/create", b'{"name": "r1"}').status == 200
    data = b"weights" * 50
    oid = _upload(hub, "alice/r1", data)
    commit = _commit_body(
        _file_op("config.json", b"{}"), _file_op("README.md", README), _lfs_op("model.safetensors", oid, len(data))
    )
    assert request(hub, "POST", "/api/models/alice/r1/commit/main", commit).status == 200
    # A repository that a wrongly accepted delete would remove (rather than r1, which every case reads).
    assert request(hub, "POST", "/api/repos/create", b'{"name": "victim"}').status == 200
    return oid


@pytest.fixture(scope="module")
def canary(tmp_path_factory):
    path = tmp_path_factory.mktemp("security") / "canary.txt"
    path.write_bytes(CANARY)
    return path


def _populate_private(hub: LocalHub) -> str:
    """alice/secret, private, holding SECRET in LFS; bob/pub, bob's public repository. Returns SECRET's oid."""
    assert request(hub, "POST", "/api/repos/create", b'{"name": "secret", "private": true}').status == 200
    oid = _upload(hub, "alice/secret", SECRET)
    commit = _commit_body(_lfs_op("weights.bin", oid, len(SECRET)))
    assert request(hub, "POST", "/api/models/alice/secret/commit/main", commit).status == 200
    assert request(hub, "POST", "/api/repos/create", b'{"name": "pub"}', token=BOB_TOKEN).status == 200
    return oid


@pytest.fixture(scope="module")
def hub(canary):
    """One server for the table-driven cases (fast): each case is refused, changing nothing, or adds a name."""
    with LocalHub(
        canary.parent / "hub", token=TOKEN, user="alice", other_accounts={BOB_TOKEN: "bob"}, **LIMITS
    ) as server:
        server.lfs_oid = _populate(server)
        server.secret_oid = _populate_private(server)
        yield server
        # No case passed by breaking the repository the others read.
        assert server.repo_files("alice/r1")["README.md"] == README
        assert request(server, "GET", "/api/models/alice/victim", auth=False).status == 200


@pytest.fixture
def fresh_hub(tmp_path):
    """A server of its own, for the cases that count threads or change the repository."""
    with LocalHub(tmp_path / "hub", token=TOKEN, user="alice", other_accounts={BOB_TOKEN: "bob"}, **LIMITS) as server:
        server.lfs_oid = _populate(server)
        yield server


# ---------------------------------------------------------------------------------------------
# Raw HTTP.
# ---------------------------------------------------------------------------------------------


class Answer:
    """A response read off the wire: status, the raw header block, headers (lower-cased names) and body."""

    def __init__(self, raw: bytes):
        self.raw = raw
        head, _, self.body = raw.partition(b"\r\n\r\n")
        self.head = head
        lines = head.split(b"\r\n")
        self.status = int(lines[0].split()[1]) if lines[0].startswith(b"HTTP/") else 0
        self.headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            self.headers.setdefault(name.strip().lower().decode("latin-1"), []).append(value.strip())

    def __repr__(self) -> str:
        return f"Answer({self.raw[:300]!r})"


def send(hub: LocalHub, data: bytes, timeout: float = 5.0, shut_write: bool = False) -> Answer:
    """Send raw bytes on a fresh connection; read one response (the server closes or sends Content-Length)."""
    host, port = hub.endpoint.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        try:
            sock.sendall(data)
            if shut_write:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server answered and closed before taking it all: its answer is still to be read
        raw = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            raw += chunk
            head, sep, body = raw.partition(b"\r\n\r\n")
            if sep:
                length = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
                if length and len(body) >= int(length[0].split(b":")[1]):
                    break
    return Answer(raw)


def request(
    hub: LocalHub,
    method: str,
    target: str,
    body: bytes = b"",
    headers: dict | None = None,
    auth: bool = True,
    token: str = TOKEN,
    **kwargs,
) -> Answer:
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    if auth:
        lines.append(f"Authorization: Bearer {token}")
    headers = {"Content-Length": str(len(body)), **(headers or {})}
    lines += [f"{name}: {value}" for name, value in headers.items() if value is not None]
    return send(hub, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body, **kwargs)


def assert_safe(answer: Answer) -> None:
    """Never a 500, never the canary, every header line one clean line."""
    assert answer.status != 0, answer
    assert answer.status != 500, answer
    assert CANARY not in answer.raw, answer
    for line in answer.head.split(b"\r\n")[1:]:
        assert b"\r" not in line and b"\n" not in line, answer
        name, sep, value = line.partition(b": ")
        assert sep and name.replace(b"-", b"").isalnum(), answer
        assert all(0x20 <= c < 0x7F or c == 0x09 for c in value), answer
    for injected in ("set-cookie", "x-injected"):
        assert injected not in answer.headers, answer


# ---------------------------------------------------------------------------------------------
# 1. Path traversal, field by field.
# ---------------------------------------------------------------------------------------------

# What an attacker puts where a name goes; {canary} is the canary's absolute path.
TRAVERSALS = [
    "{canary}",
    "../canary.txt",
    "../../canary.txt",
    "../../../../../../{canary}",
    "lfs/../../canary.txt",
    "./../canary.txt",
    "..\\..\\canary.txt",
    "%2e%2e/%2e%2e/canary.txt",
    "..%2f..%2fcanary.txt",
    "%2e%2e%2f%2e%2e%2fcanary.txt",
    "%252e%252e%252fcanary.txt",
    "/etc/passwd",
    "..",
    "",
]


def _traversal(template: str, canary) -> str:
    return template.replace("{canary}", str(canary))


@pytest.mark.parametrize("template", TRAVERSALS)
def test_a_commit_cannot_point_an_lfs_file_outside_the_store(hub, canary, template):
    oid = _traversal(template, canary)
    for size in (len(CANARY), None):
        op = {"key": "lfsFile", "value": {"path": "stolen.bin", "algo": "sha256", "oid": oid, "size": size}}
        answer = request(hub, "POST", "/api/models/alice/r1/commit/main", _commit_body(op))
        assert_safe(answer)
        assert answer.status in (400, 422), answer
    served = request(hub, "GET", "/alice/r1/resolve/main/stolen.bin", auth=False)
    assert served.status == 404 and CANARY not in served.raw


@pytest.mark.parametrize("template", TRAVERSALS + ["A" * 64, "0" * 63, "0" * 65])
def test_lfs_verify_is_no_file_existence_oracle(hub, canary, template):
    oid = _traversal(template, canary)

    def verify(oid: str, size: int) -> Answer:
        payload = json.dumps({"oid": oid, "size": size}).encode()
        return request(hub, "POST", "/alice/r1.git/info/lfs/objects/verify", payload)

    existing, missing = verify(oid, len(CANARY)), verify(oid.replace("canary", "nothing-here"), len(CANARY))
    for answer in (existing, missing):
        assert_safe(answer)
        assert answer.status in (400, 404, 422), answer
    # The same answer whether or not the named file exists.
    assert (existing.status, existing.body.replace(b"canary", b"X")) == (
        missing.status,
        missing.body.replace(b"nothing-here", b"X"),
    )
    # A real object still verifies.
    assert verify(hub.lfs_oid, 350).status == 200


# Every URL that takes a repo id, a revision or a file path, with the slot to fill.
URL_SLOTS = [
    ("GET", "/{x}/resolve/main/config.json"),
    ("GET", "/alice/{x}/resolve/main/config.json"),
    ("GET", "/alice/r1/resolve/{x}/config.json"),
    ("GET", "/alice/r1/resolve/main/{x}"),
    ("HEAD", "/alice/r1/resolve/main/{x}"),
    ("GET", "/alice/r1/resolve/main/sub/{x}"),
    ("GET", "/api/models/{x}/r1"),
    ("GET", "/api/models/alice/{x}"),
    ("GET", "/api/models/alice/r1/revision/{x}"),
    ("GET", "/api/models/alice/r1/tree/{x}"),
    ("GET", "/api/models/alice/r1/tree/main/{x}"),
    ("GET", "/api/models/alice/r1/commits/{x}"),
    ("GET", "/datasets/{x}/resolve/main/config.json"),
    ("POST", "/api/models/alice/r1/branch/{x}"),
    ("DELETE", "/api/models/alice/r1/branch/{x}"),
    ("POST", "/api/models/alice/r1/tag/{x}"),
    ("POST", "/api/models/alice/r1/preupload/{x}"),
    ("POST", "/api/models/alice/r1/commit/{x}"),
    ("PUT", "/lfs-upload/{x}"),
    ("POST", "/{x}.git/info/lfs/objects/batch"),
]


@pytest.mark.parametrize("method,slot", URL_SLOTS)
@pytest.mark.parametrize("template", TRAVERSALS[:-1])
@pytest.mark.parametrize("encode", [False, True], ids=["as-is", "encoded"])
def test_traversal_in_urls_serves_nothing_outside(hub, canary, method, slot, template, encode):
    value = _traversal(template, canary)
    value = quote(value, safe="") if encode else value.replace("\\", "%5C")
    body = b'{"tag": "t1"}' if "tag" in slot else b"{}"
    answer = request(hub, method, slot.replace("{x}", value), body)
    assert_safe(answer)
    # A branch may be named like a path ("tmp/x/canary.txt"): that is a name, not a file.
    assert answer.status >= 400 or slot.endswith("/branch/{x}") and ".." not in value, answer


# Fields of JSON bodies that name something (repo names, organisations, paths, refs).
BODY_FIELDS = [
    ("POST", "/api/repos/create", lambda v: {"name": v}),
    ("POST", "/api/repos/create", lambda v: {"name": "ok", "organization": v}),
    ("DELETE", "/api/repos/delete", lambda v: {"name": v}),
    ("DELETE", "/api/repos/delete", lambda v: {"name": "victim", "organization": v}),
    ("POST", "/api/models/alice/r1/branch/b1", lambda v: {"startingPoint": v}),
    ("POST", "/api/models/alice/r1/tag/main", lambda v: {"tag": v}),
    ("POST", "/api/models/alice/r1/paths-info/main", lambda v: {"paths": [v]}),
    ("POST", "/api/models/alice/r1/preupload/main", lambda v: {"files": [{"path": v, "sample": "", "size": 1}]}),
]


@pytest.mark.parametrize("method,path,make", BODY_FIELDS)
@pytest.mark.parametrize("template", TRAVERSALS)
def test_traversal_in_json_fields_is_refused(hub, canary, method, path, make, template):
    def outside() -> list:
        return sorted(p for p in canary.parent.parent.rglob("*") if hub.root_dir not in (p, *p.parents))

    before = outside()
    answer = request(
        hub,
        method,
        path,
        json.dumps(make(_traversal(template, canary))).encode(),
        headers={"Content-Type": "application/json"},
    )
    assert_safe(answer)
    if "paths-info" in path:
        assert answer.status == 200 and json.loads(answer.body) == []  # nothing there, as for any unknown path
    elif "preupload" in path and "%" in template:
        assert answer.status == 200  # JSON is not URL-decoded: "%2e%2e" is a literal (harmless) file name
    else:
        assert 400 <= answer.status < 500, answer
    # Nothing was created outside the root either.
    assert outside() == before


@pytest.mark.parametrize("template", TRAVERSALS)
@pytest.mark.parametrize("key", ["file", "deletedFile", "deletedFolder", "lfsFile"])
def test_traversal_in_commit_paths_is_refused(hub, canary, template, key):
    value = {"path": _traversal(template, canary), "content": "eA==", "oid": hub.lfs_oid, "size": 350}
    answer = request(
        hub, "POST", "/api/models/alice/r1/commit/main", _commit_body({"key": key, "value": value}, header={})
    )
    assert_safe(answer)
    if "%" in template and key in ("file", "lfsFile"):
        # JSON is not URL-decoded: "%2e%2e" is a literal name, stored inside the repository and served from it.
        assert answer.status == 200, answer
        served = request(hub, "GET", "/alice/r1/resolve/main/" + quote(value["path"]), auth=False)
        assert served.body == (b"x" if key == "file" else b"weights" * 50)
    elif "%" in template:
        assert answer.status in (200, 404), answer  # deleting that literal name, if an earlier case made it
    else:
        assert answer.status in (400, 404), answer


def test_a_stored_entry_pointing_outside_is_never_served(tmp_path, canary):
    # A repository written by an older, unchecked server: its LFS entry names the canary.
    with LocalHub(tmp_path / "hub", token=TOKEN, user="alice") as server:
        _populate(server)
    record = tmp_path / "hub" / "repos" / "model" / "alice" / "r1.json"
    data = json.loads(record.read_text())
    head = data["branches"]["main"]
    data["commits"][head]["files"]["model.safetensors"]["lfs_sha256"] = str(canary)
    data["commits"][head]["files"]["config.json"]["oid"] = "../../canary.txt"
    record.write_text(json.dumps(data))
    with LocalHub(tmp_path / "hub", token=TOKEN, user="alice") as server:
        for path in ("model.safetensors", "config.json"):
            answer = request(server, "GET", f"/alice/r1/resolve/main/{path}", auth=False)
            assert_safe(answer)
            assert answer.status == 404 and b"invalid object id" in answer.body, answer
        info = request(server, "GET", "/api/models/alice/r1", auth=False)
        assert info.status == 200 and CANARY not in info.raw


# ---------------------------------------------------------------------------------------------
# 2. CR/LF in every echoed value.
# ---------------------------------------------------------------------------------------------

INJECTIONS = [
    "x%0d%0aSet-Cookie:%20a=b",
    "x%0aX-Injected:%201",
    "x%0dX-Injected:%201",
    "x%0d%0a%0d%0a<html>",
    "x%c2%85X-Injected:%201",
    "x%00y",
]
ECHOING_URLS = [
    ("GET", "/alice/r1/resolve/main/{x}"),
    ("HEAD", "/alice/r1/resolve/main/{x}"),
    ("GET", "/alice/r1/resolve/{x}/config.json"),
    ("GET", "/alice/{x}/resolve/main/config.json"),
    ("GET", "/api/models/alice/{x}"),
    ("GET", "/api/models/alice/r1/revision/{x}"),
    ("GET", "/api/models/alice/r1/tree/main/{x}"),
    ("GET", "/api/models/alice/r1/commits/{x}"),
    ("POST", "/api/models/alice/r1/branch/{x}"),
    ("DELETE", "/api/models/alice/r1/tag/{x}"),
    ("POST", "/api/models/alice/r1/commit/{x}"),
    ("GET", "/nothing/{x}"),
    ("PUT", "/lfs-upload/{x}"),
]


@pytest.mark.parametrize("method,slot", ECHOING_URLS)
@pytest.mark.parametrize("injection", INJECTIONS)
@pytest.mark.parametrize("auth", [False, True], ids=["anonymous", "token"])
def test_no_line_break_from_the_url_reaches_a_header(hub, method, slot, injection, auth):
    answer = request(hub, method, slot.replace("{x}", injection), b"{}", auth=auth)
    assert_safe(answer)
    assert answer.status >= 400
    if method != "HEAD" and b"x-error-message" in answer.head.lower():
        assert answer.body.startswith(b"{")  # the body follows the headers where Content-Length says


ECHOING_BODIES = [
    ("POST", "/api/repos/create", lambda v: {"name": v}),
    ("POST", "/api/repos/create", lambda v: {"name": "ok", "type": v}),
    ("POST", "/api/repos/create", lambda v: {"name": "ok", "organization": v}),
    ("POST", "/api/models/alice/r1/tag/main", lambda v: {"tag": v}),
    ("POST", "/api/models/alice/r1/branch/b2", lambda v: {"startingPoint": v}),
    ("POST", "/alice/r1.git/info/lfs/objects/verify", lambda v: {"oid": v, "size": 1}),
    ("POST", "/alice/r1.git/info/lfs/objects/batch", lambda v: {"operation": v}),
]
COMMIT_LINES = [
    lambda v: {"key": "deletedFile", "value": {"path": v}},
    lambda v: {"key": "deletedFolder", "value": {"path": v}},
    lambda v: {"key": "file", "value": {"path": v, "content": "!"}},
    lambda v: {"key": "lfsFile", "value": {"path": "a.bin", "oid": v}},
    lambda v: {"key": v, "value": {"path": "a"}},
]


@pytest.mark.parametrize("method,path,make", ECHOING_BODIES)
@pytest.mark.parametrize("value", ["x\r\nSet-Cookie: a=b", "x\nX-Injected: 1", "x\rX-Injected: 1", "x\u2028y\x85z"])
def test_no_line_break_from_a_json_body_reaches_a_header(hub, method, path, make, value):
    answer = request(hub, method, path, json.dumps(make(value)).encode())
    assert_safe(answer)
    assert 400 <= answer.status < 500, answer


@pytest.mark.parametrize("make", COMMIT_LINES)
@pytest.mark.parametrize("value", ["x\r\nSet-Cookie: a=b", "x\nX-Injected: 1", "a/x\rX-Injected: 1"])
def test_no_line_break_from_a_commit_reaches_a_header(hub, make, value):
    answer = request(hub, "POST", "/api/models/alice/r1/commit/main", _commit_body(make(value), header={}))
    assert_safe(answer)
    assert 400 <= answer.status < 500, answer


# ---------------------------------------------------------------------------------------------
# 3. Bodies: judged by their headers first, capped, and never waited on forever.
# ---------------------------------------------------------------------------------------------

WRITES = [
    ("POST", "/api/repos/create"),
    ("DELETE", "/api/repos/delete"),
    ("POST", "/api/models/alice/r1/commit/main"),
    ("POST", "/api/models/alice/r1/preupload/main"),
    ("POST", "/api/models/alice/r1/branch/b1"),
    ("POST", "/alice/r1.git/info/lfs/objects/batch"),
    ("POST", "/alice/r1.git/info/lfs/objects/verify"),
    ("PUT", "/lfs-upload/unknown-ticket"),
]


@pytest.mark.parametrize("method,path", WRITES)
@pytest.mark.parametrize("auth", [False, True], ids=["anonymous", "token"])
def test_an_oversize_body_is_refused_before_it_is_read(hub, method, path, auth):
    # Only the headers are sent: an answer at all proves the server did not wait for 400 GB.
    start = time.monotonic()
    answer = request(hub, method, path, headers={"Content-Length": str(400 << 30)}, auth=auth)
    assert time.monotonic() - start < 0.9  # well under the request timeout
    assert_safe(answer)
    expected = 403 if "lfs-upload" in path else 413
    assert answer.status == expected, answer
    assert answer.headers["connection"] == [b"close"]


@pytest.mark.parametrize("method,path", WRITES)
def test_an_anonymous_write_is_refused_before_its_body_is_read(hub, method, path):
    start = time.monotonic()
    answer = request(hub, method, path, headers={"Content-Length": "1000"}, auth=False)
    assert time.monotonic() - start < 0.9
    assert_safe(answer)
    assert answer.status == (403 if "lfs-upload" in path else 401), answer


def test_a_body_within_the_limit_but_over_an_upload_ticket_is_refused(hub):
    data = b"x" * 100
    oid = hashlib.sha256(data).hexdigest()
    batch = request(
        hub,
        "POST",
        "/alice/r1.git/info/lfs/objects/batch",
        json.dumps({"operation": "upload", "objects": [{"oid": oid, "size": 100}]}).encode(),
    )
    href = json.loads(batch.body)["objects"][0]["actions"]["upload"]["href"].removeprefix(hub.endpoint)
    answer = request(hub, "PUT", href, headers={"Content-Length": "5000"}, auth=False)
    assert answer.status == 413 and b"100 bytes" in answer.body, answer
    assert request(hub, "PUT", href, data, auth=False).status == 200  # the ticket still works


def test_the_body_size_limit_holds_for_authenticated_writes(fresh_hub):
    hub = fresh_hub
    big = json.dumps({"name": "big", "pad": "x" * (LIMITS["max_body_size"] + 10)}).encode()
    answer = request(hub, "POST", "/api/repos/create", big)
    assert answer.status == 413 and b"1048576" in answer.body, answer
    assert request(hub, "POST", "/api/repos/create", b'{"name": "small"}').status == 200


CHUNKED = {"Content-Length": None, "Transfer-Encoding": "chunked"}
# (headers, body, status with a token, status without): framing headers are judged before the token, chunk
# sizes (part of the body) after it.
BAD_FRAMING = [
    ({"Content-Length": "abc"}, b"", 400, 400),
    ({"Content-Length": "-1"}, b"", 400, 400),
    ({"Content-Length": "+5"}, b"hello", 400, 400),
    ({"Content-Length": "1e3"}, b"", 400, 400),
    ({"Content-Length": "0x10"}, b"", 400, 400),
    ({"Content-Length": " "}, b"", 400, 400),
    ({"Content-Length": "5, 6"}, b"hello", 400, 400),
    ({"Content-Length": "99999999999999999999999999999"}, b"", 413, 413),
    ({"Content-Length": "5", "Transfer-Encoding": "chunked"}, b"0\r\n\r\n", 400, 400),
    ({"Content-Length": None, "Transfer-Encoding": "gzip"}, b"", 501, 501),
    ({"Content-Length": None, "Transfer-Encoding": "gzip, chunked"}, b"0\r\n\r\n", 501, 501),
    ({**CHUNKED}, b"zz\r\nhello\r\n0\r\n\r\n", 400, 401),
    ({**CHUNKED}, b"-5\r\nhello\r\n0\r\n\r\n", 400, 401),
    ({**CHUNKED}, b"\r\n", 400, 401),
    ({**CHUNKED}, b"5\r\nhelloXX0\r\n\r\n", 400, 401),
    ({**CHUNKED}, b"5\r\nhel", 400, 401),
    ({**CHUNKED}, b"1" * 5000 + b"\r\n", 400, 401),
    ({**CHUNKED}, b"ffffffffffffffffffff\r\n", 413, 401),
]


@pytest.mark.parametrize("headers,body,with_token,anonymous", BAD_FRAMING)
@pytest.mark.parametrize("auth", [False, True], ids=["anonymous", "token"])
def test_bad_framing_is_a_400_without_a_traceback(hub, caplog, capfd, headers, body, with_token, anonymous, auth):
    with caplog.at_level(logging.DEBUG, logger="tools.local_hub"):
        answer = request(hub, "POST", "/api/repos/create", body, headers=headers, auth=auth, shut_write=True)
    assert_safe(answer)
    assert answer.status == (with_token if auth else anonymous), answer
    assert "Traceback" not in caplog.text and "Traceback" not in capfd.readouterr().err


def test_chunked_bodies_are_read_and_capped(fresh_hub):
    hub = fresh_hub
    payload = b'{"name": "chunked"}'
    body = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (payload[:5], payload[5:])) + b"0\r\n\r\n"
    answer = request(hub, "POST", "/api/repos/create", body, headers=CHUNKED)
    assert answer.status == 200, answer
    chunk = b"x" * (256 << 10)
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(5)) + b"0\r\n\r\n"
    answer = request(hub, "POST", "/api/repos/create", body, headers=CHUNKED)
    assert answer.status == 413, answer


@pytest.mark.parametrize(
    "headers,sent",
    [
        ({"Content-Length": "100"}, b'{"name": '),
        ({"Content-Length": None, "Transfer-Encoding": "chunked"}, b'10\r\n{"name"'),
    ],
)
def test_a_partial_body_times_out_and_frees_its_thread(fresh_hub, caplog, capfd, headers, sent):
    hub = fresh_hub
    threads = threading.active_count()
    start = time.monotonic()
    with caplog.at_level(logging.DEBUG, logger="tools.local_hub"):
        answer = request(hub, "POST", "/api/repos/create", sent, headers=headers, timeout=10)
    waited = time.monotonic() - start
    assert LIMITS["request_timeout"] * 0.9 <= waited < LIMITS["request_timeout"] + 3, waited
    assert answer.status in (0, 408), answer  # a 408 if the socket still takes it, else just closed
    assert "Traceback" not in caplog.text and "Traceback" not in capfd.readouterr().err
    deadline = time.monotonic() + 3
    while threading.active_count() > threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= threads


# ---------------------------------------------------------------------------------------------
# 4. Wrong-shaped JSON is a 400.
# ---------------------------------------------------------------------------------------------

SHAPES = [b"[]", b'"x"', b"1", b"null", b"true", b"{", b"\xff\xfe", b'{"a": NaN}']
JSON_ENDPOINTS = [
    (
        "POST",
        "/api/repos/create",
        [
            {"name": 1},
            {"name": "ok", "type": []},
            {"name": "ok", "organization": {}},
            {"name": "ok", "private": "yes"},
            {"name": "ok", "visibility": 3},
        ],
    ),
    ("DELETE", "/api/repos/delete", [{"name": ["r1"]}, {"name": "r1", "type": 1}]),
    ("POST", "/api/validate-yaml", [{"content": 1}, {"content": ["---"]}]),
    ("POST", "/api/models/alice/r1/paths-info/main", [{"paths": "config.json"}, {"paths": [1]}, {"paths": [["a"]]}]),
    ("POST", "/api/models/alice/r1/branch/b1", [{"startingPoint": 1}, {"startingPoint": ["main"]}]),
    ("POST", "/api/models/alice/r1/tag/main", [{"tag": 1}, {"tag": None}, {"tag": ["v"]}]),
    (
        "POST",
        "/api/models/alice/r1/preupload/main",
        [
            {"files": "a"},
            {"files": [1]},
            {"files": [{"path": 1}]},
            {"files": [{"path": "a", "sample": 1}]},
            {"files": [{"path": "a", "sample": "!!!"}]},
            {"files": [{"path": "a", "size": "1"}]},
            {"files": [{"path": "a"}], "gitIgnore": 1},
            {"files": [{}]},
        ],
    ),
    (
        "POST",
        "/alice/r1.git/info/lfs/objects/batch",
        [
            {"operation": "upload", "objects": {}},
            {"operation": "upload", "objects": [1]},
            {"operation": "upload", "objects": "x"},
            {"operation": 1},
        ],
    ),
    ("POST", "/alice/r1.git/info/lfs/objects/verify", [{"oid": 1, "size": 1}, {"oid": ["a"]}, {"size": "x"}, {}]),
]
COMMITS = [
    b"",
    b"[]",
    b"1\n",
    b'{"key": "header"}',
    b'{"key": "header", "value": []}',
    b'{"key": "header", "value": {"summary": 1}}',
    b'{"key": "header", "value": {"parentCommit": []}}',
    b'{"key": "header", "value": {}}\n[1]',
    b'{"key": "header", "value": {}}\n{"key": "file"}',
    b'{"key": "header", "value": {}}\n{"key": "file", "value": []}',
    b'{"key": "header", "value": {}}\n{"key": "file", "value": {"path": 1}}',
    b'{"key": "header", "value": {}}\n{"key": "file", "value": {"path": "a", "content": 1}}',
    b'{"key": "header", "value": {}}\n{"key": "lfsFile", "value": {"path": "a", "oid": 1}}',
    b'{"key": "header", "value": {}}\n{"key": "lfsFile", "value": {"path": "a", "oid": "%s", "size": "350"}}',
    b'{"key": "header", "value": {}}\n{"key": ["file"], "value": {"path": "a"}}',
    b'\xff\xfe{"key": "header"}',
]


def _shape_cases():
    for method, path, fields in JSON_ENDPOINTS:
        for body in SHAPES:
            yield pytest.param(method, path, body, id=f"{path}-{body!r}")
        for value in fields:
            yield pytest.param(method, path, json.dumps(value).encode(), id=f"{path}-{value}")
    for body in COMMITS + SHAPES:
        yield pytest.param("POST", "/api/models/alice/r1/commit/main", body, id=f"commit-{body!r}")


@pytest.mark.parametrize("method,path,body", list(_shape_cases()))
def test_wrong_shaped_json_is_a_400(hub, method, path, body):
    body = body.replace(b"%s", hub.lfs_oid.encode())
    answer = request(hub, method, path, body, headers={"Content-Type": "application/json"})
    assert_safe(answer)
    assert answer.status == 400, answer
    assert json.loads(answer.body)["error"]


# ---------------------------------------------------------------------------------------------
# 5. Bounded concurrency.
# ---------------------------------------------------------------------------------------------


def test_connections_are_capped_and_the_server_stays_responsive(tmp_path):
    # A long request timeout, so that the stalled downloads surely hold their slots while the test looks.
    with LocalHub(tmp_path / "hub", token=TOKEN, user="alice", **{**LIMITS, "request_timeout": 30}) as hub:
        _populate(hub)
        oid = _upload(hub, "alice/r1", b"\1" * BIG)
        commit = _commit_body(_lfs_op("big.bin", oid, BIG))
        assert request(hub, "POST", "/api/models/alice/r1/commit/main", commit).status == 200
        _check_capped_and_responsive(hub)


def _check_capped_and_responsive(hub: LocalHub) -> None:
    threads = threading.active_count()
    cap = LIMITS["max_connections"]
    host, port = hub.endpoint.removeprefix("http://").split(":")
    # Every slot at work: downloads whose clients do not read (an idle connection would make room instead).
    busy = []
    for _ in range(cap):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(5)
        sock.connect((host, int(port)))
        sock.sendall(b"GET /alice/r1/resolve/main/big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        busy.append(sock)
    idle = [socket.create_connection((host, int(port)), timeout=5) for _ in range(cap * 2)]
    try:
        time.sleep(0.7)
        assert threading.active_count() <= threads + cap
        # Beyond the cap a new client gets a quick 503 rather than a hang.
        start = time.monotonic()
        answer = request(hub, "GET", "/api/models/alice/r1", auth=False)
        assert time.monotonic() - start < 0.5
        assert answer.status == 503 and answer.headers["retry-after"] == [b"1"], answer
    finally:
        for sock in busy + idle:
            sock.close()

    # A bounded load loop: 4 clients x 40 requests, fresh connections, 2x the cap in flight at most.
    statuses: list[int] = []
    peak = [0]

    def client() -> None:
        for _ in range(40):
            statuses.append(request(hub, "GET", "/alice/r1/resolve/main/config.json", auth=False).status)
            peak[0] = max(peak[0], threading.active_count())

    start = time.monotonic()
    workers = [threading.Thread(target=client) for _ in range(4)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert time.monotonic() - start < 20
    assert peak[0] <= threads + 4 + cap
    assert len(statuses) == 160 and set(statuses) <= {200, 503} and statuses.count(200) >= 150, statuses
    assert request(hub, "GET", "/alice/r1/resolve/main/config.json", auth=False).body == b"{}"


def test_idle_keep_alive_connections_are_closed_after_the_timeout(fresh_hub):
    hub = fresh_hub
    host, port = hub.endpoint.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        start = time.monotonic()
        assert sock.recv(1) == b""
        assert time.monotonic() - start < LIMITS["request_timeout"] + 2


# ---------------------------------------------------------------------------------------------
# 6. Fuzz: request lines and bodies.
# ---------------------------------------------------------------------------------------------

ATOMS = [
    "alice",
    "r1",
    "api",
    "models",
    "datasets",
    "resolve",
    "main",
    "tree",
    "revision",
    "commit",
    "commits",
    "paths-info",
    "preupload",
    "branch",
    "tag",
    "refs",
    "config.json",
    "README.md",
    "model.safetensors",
    "r1.git",
    "info",
    "lfs",
    "objects",
    "batch",
    "verify",
    "lfs-upload",
    "..",
    ".",
    "%2e%2e",
    "%2f",
    "%00",
    "%0d%0a",
    "%c0%ae",
    "canary.txt",
    "objects",
    "repos",
    "model",
    "alice%2fr1",
    "~",
    "%252e",
]


@st.composite
def fuzz_requests(draw, canary_path: str):
    segments = draw(
        st.lists(
            st.one_of(
                st.sampled_from(ATOMS + [quote(canary_path, safe="")]),
                st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="?#%"), max_size=8),
            ),
            max_size=8,
        )
    )
    method = draw(st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]))
    query = draw(st.sampled_from(["", "?recursive=true", "?expand=1&blobs=true", "?create_pr=1", "?x=%0d%0a"]))
    json_values = st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-2, 10**6)
        | st.sampled_from(TRAVERSALS + [canary_path, "\r\n"])
        | st.text(max_size=10),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "name",
                        "path",
                        "oid",
                        "size",
                        "paths",
                        "files",
                        "objects",
                        "operation",
                        "key",
                        "value",
                        "tag",
                        "startingPoint",
                        "content",
                        "organization",
                        "type",
                        "sample",
                    ]
                ),
                inner,
                max_size=4,
            )
        ),
        max_leaves=8,
    )
    body = draw(
        st.one_of(
            st.just(b""),
            json_values.map(lambda v: json.dumps(v).encode()),
            st.lists(json_values.map(json.dumps), max_size=3).map(lambda ls: "\n".join(ls).encode()),
            st.binary(max_size=64),
        )
    )
    auth = draw(st.booleans())
    return method, "/" + "/".join(segments) + query, body, auth


def test_fuzzed_requests_never_escape_the_root_nor_fail(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    canary = root / "canary.txt"
    canary.write_bytes(CANARY)
    with LocalHub(root / "hub", token=TOKEN, user="alice", **LIMITS) as server:
        _populate(server)

        @settings(
            max_examples=100,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(fuzz_requests(str(canary)))
        def check(case):
            method, target, body, auth = case
            assert_safe(request(server, method, target, body, auth=auth))

        check()
        # The repository is still whole and served.
        assert request(server, "GET", "/alice/r1/resolve/main/README.md", auth=False).body == README


@st.composite
def raw_requests(draw, canary_path: str) -> bytes:
    """Whole requests as bytes: odd methods, targets of any byte, odd versions and framing headers."""
    method = draw(st.sampled_from([b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"get", b"G\xe9T", b"CONNECT"]))
    target = draw(
        st.one_of(
            st.binary(max_size=40).map(lambda b: b"/" + b.replace(b"\r", b"").replace(b"\n", b"").replace(b" ", b"")),
            st.sampled_from(
                [
                    b"*",
                    b"http://127.0.0.1/alice/r1/resolve/main/config.json",
                    b"//" + canary_path.encode(),
                    b"/alice/r1/resolve/main/" + b"%2e%2e/" * 8 + canary_path.encode().lstrip(b"/"),
                    b"/" + b"a" * 5000,
                ]
            ),
        )
    )
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1x", b"FTP/1.1", b"HTTP/01.1"]))
    headers = draw(
        st.lists(
            st.sampled_from(
                [
                    b"Content-Length: 5",
                    b"Content-Length: -3",
                    b"Content-Length: 10000000000",
                    b"Content-Length: x",
                    b"Transfer-Encoding: chunked",
                    b"Transfer-Encoding: identity",
                    b"Expect: 100-continue",
                    b"Authorization: Bearer " + TOKEN.encode(),
                    b"Authorization: Basic abc",
                    b"Range: bytes=0-1",
                    b"Content-Type: application/json",
                    b"X-Long: " + b"y" * 70000,
                    b"no colon here",
                ]
            ),
            max_size=4,
        )
    )
    body = draw(st.binary(max_size=30))
    return (
        method + b" " + target + b" " + version + b"\r\n" + b"\r\n".join([b"Host: x", *headers]) + b"\r\n\r\n" + body
    )


def test_fuzzed_raw_requests_never_escape_the_root_nor_fail(tmp_path_factory, caplog):
    root = tmp_path_factory.mktemp("fuzz-raw")
    canary = root / "canary.txt"
    canary.write_bytes(CANARY)
    with LocalHub(root / "hub", token=TOKEN, user="alice", **LIMITS) as server:
        _populate(server)

        @settings(
            max_examples=100,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(raw_requests(str(canary)))
        def check(data):
            answer = send(server, data, shut_write=True)
            assert answer.status not in (0, 500), answer  # always an answer, never an internal error
            assert_safe(answer)

        with caplog.at_level(logging.DEBUG, logger="tools.local_hub"):
            check()
        assert "Traceback" not in caplog.text
        assert request(server, "GET", "/alice/r1/resolve/main/README.md", auth=False).body == README


# ---------------------------------------------------------------------------------------------
# 7. An LFS object is reachable only from the repository it was uploaded to, and no answer tells whether
#    another repository holds it. bob, in his own public repository, names the sha256 of an object in alice's
#    private one; every answer must be the one for an object that exists nowhere.
# ---------------------------------------------------------------------------------------------

NOWHERE = b"never uploaded anywhere " * 20  # same size as SECRET, so only existence could tell them apart


def _bob(hub: LocalHub, method: str, path: str, body: bytes) -> Answer:
    return request(hub, method, path, body, token=BOB_TOKEN)


# Every request that takes an LFS oid from the client: (name, how bob sends it, size known to bob).
OBJECT_READS = [
    ("batch", lambda hub, oid, size: _batch(hub, "bob/pub", [{"oid": oid, "size": size}], token=BOB_TOKEN)),
    (
        "verify",
        lambda hub, oid, size: _bob(
            hub, "POST", "/bob/pub.git/info/lfs/objects/verify", json.dumps({"oid": oid, "size": size}).encode()
        ),
    ),
    (
        "commit",
        lambda hub, oid, size: _bob(
            hub, "POST", "/api/models/bob/pub/commit/main", _commit_body(_lfs_op("stolen.bin", oid, size))
        ),
    ),
    (
        "commit-without-size",
        lambda hub, oid, size: _bob(
            hub, "POST", "/api/models/bob/pub/commit/main", _commit_body(_lfs_op("stolen.bin", oid, None))
        ),
    ),
    (
        "commit-to-a-pr",
        lambda hub, oid, size: _bob(
            hub, "POST", "/api/models/bob/pub/commit/main?create_pr=1", _commit_body(_lfs_op("stolen.bin", oid, size))
        ),
    ),
    (
        "upload-url",
        lambda hub, oid, size: request(  # a PUT of other bytes to a URL for the named oid
            hub,
            "PUT",
            json.loads(_batch(hub, "bob/pub", [{"oid": oid, "size": size}], token=BOB_TOKEN).body)["objects"][0][
                "actions"
            ]["upload"]["href"].removeprefix(hub.endpoint),
            b"x" * size,
            auth=False,
        ),
    ),
]
# Every way to read what a repository points at, after the attempts above.
REPO_READS = [
    "/bob/pub/resolve/main/stolen.bin",
    "/api/models/bob/pub/tree/main?recursive=true&expand=true",
    "/api/models/bob/pub?blobs=true",
    "/api/models/bob/pub/revision/refs%2Fpr%2F1",
]


def _without(answer: Answer, oid: str) -> tuple[int, bytes]:
    """The answer with the oid, upload URLs and dates blanked: what is left may not depend on the object."""
    body = re.sub(rb"lfs-upload/[A-Za-z0-9_-]+", b"lfs-upload/T", answer.body.replace(oid.encode(), b"OID"))
    return answer.status, re.sub(rb'"(date|lastModified)": "[^"]*"|[0-9a-f]{40}', b"D", body)


@pytest.mark.parametrize("name,attempt", OBJECT_READS, ids=[name for name, _ in OBJECT_READS])
def test_another_repositorys_lfs_object_is_neither_reachable_nor_told(hub, name, attempt):
    nowhere = hashlib.sha256(NOWHERE).hexdigest()
    secret = attempt(hub, hub.secret_oid, len(SECRET))
    missing = attempt(hub, nowhere, len(NOWHERE))
    assert_safe(secret)
    assert _without(secret, hub.secret_oid) == _without(missing, nowhere), (secret, missing)
    assert secret.status in (200, 400, 404, 422), secret  # a batch answer, else refused
    if name == "batch":  # "upload it", as for any object this repository does not hold
        assert "upload" in json.loads(secret.body)["objects"][0]["actions"], secret
    for path in REPO_READS:
        answer = request(hub, "GET", path, auth=False)
        assert_safe(answer)
        assert SECRET not in answer.raw and hub.secret_oid.encode() not in answer.raw, answer


def test_uploading_the_bytes_links_an_object_that_exists_elsewhere(fresh_hub):
    # bob has the same bytes (a popular base model, say): he uploads them, they are checked, and only then may
    # his commit point at them. Stored once; alice's repository is unchanged.
    hub = fresh_hub
    assert request(hub, "POST", "/api/repos/create", b'{"name": "copy"}', token=BOB_TOKEN).status == 200
    data, oid = b"weights" * 50, hub.lfs_oid
    commit = _commit_body(_lfs_op("w.bin", oid, len(data)))
    assert _bob(hub, "POST", "/api/models/bob/copy/commit/main", commit).status == 422
    assert _upload(hub, "bob/copy", data, token=BOB_TOKEN) == oid
    assert _bob(hub, "POST", "/api/models/bob/copy/commit/main", commit).status == 200
    assert request(hub, "GET", "/bob/copy/resolve/main/w.bin", auth=False).body == data
    assert sorted(p.name for p in (hub.root_dir / "lfs").iterdir()) == [oid]


# ---------------------------------------------------------------------------------------------
# 8. LFS upload URLs: for a stated size under the limit, for a writer, once, and briefly.
# ---------------------------------------------------------------------------------------------

BAD_LFS_SIZES = [-5, -1, 10**18, LIMITS["max_lfs_size"] + 1, 10 * 10**9, True, False, 1.5, "10", None, [1], {}]


@pytest.mark.parametrize("size", BAD_LFS_SIZES, ids=[repr(s) for s in BAD_LFS_SIZES])
def test_an_lfs_size_that_is_not_a_byte_count_under_the_limit_gets_no_upload_url(hub, size):
    answer = _batch(hub, "alice/r1", [{"oid": hashlib.sha256(b"a").hexdigest(), "size": size}])
    assert_safe(answer)
    assert answer.status == 200, answer  # the batch answers per object, as git-lfs does
    (obj,) = json.loads(answer.body)["objects"]
    assert "actions" not in obj and obj["error"]["code"] == 422, obj
    message = obj["error"]["message"]
    assert "\n" not in message and str(size)[:20] in message and str(LIMITS["max_lfs_size"]) in message, message


def test_a_large_anonymous_put_is_refused_before_100_continue(hub):
    # No URL admits 10 GB (the batch refuses the size), and a PUT to any other URL is refused on its headers.
    assert (
        "actions"
        not in json.loads(_batch(hub, "alice/r1", [{"oid": "a" * 64, "size": 10 * 10**9}]).body)["objects"][0]
    )
    answer = request(
        hub,
        "PUT",
        "/lfs-upload/guessed",
        auth=False,
        headers={"Content-Length": str(10 * 10**9), "Expect": "100-continue"},
    )
    assert answer.status == 403 and b"100 Continue" not in answer.raw, answer


def test_upload_urls_expire(tmp_path):
    with LocalHub(tmp_path / "hub", token=TOKEN, user="alice", **{**LIMITS, "upload_ttl": 0.3}) as hub:
        assert request(hub, "POST", "/api/repos/create", b'{"name": "r"}').status == 200
        data = b"late" * 10
        url = _upload_url(hub, "alice/r", data)
        time.sleep(0.5)
        answer = request(hub, "PUT", url, data, auth=False, headers={"Expect": "100-continue"})
        assert answer.status == 403 and b"expired" in answer.body and b"100 Continue" not in answer.raw, answer
        commit = _commit_body(_lfs_op("w.bin", hashlib.sha256(data).hexdigest(), len(data)))
        assert request(hub, "POST", "/api/models/alice/r/commit/main", commit).status == 422
        assert request(hub, "PUT", _upload_url(hub, "alice/r", data), data, auth=False).status == 200  # a new one


# ---------------------------------------------------------------------------------------------
# 9. File names: refused in one line with the reason, in every operation that names a file.
# ---------------------------------------------------------------------------------------------

# (name, reason the message gives)
BAD_NAMES = [
    ("evil\u202etxt.exe", "U+202E"),  # RIGHT-TO-LEFT OVERRIDE: shows as "evilexe.txt"
    ("a\u202ab", "U+202A"),
    ("a\u2066b\u2069", "U+2066"),  # bidi isolates
    ("a\u200fb", "U+200F"),  # RIGHT-TO-LEFT MARK
    ("a\u061cb", "U+061C"),  # ARABIC LETTER MARK
    ("zero\u200bwidth.txt", "U+200B"),
    ("\ufeffbom.txt", "U+FEFF"),
    ("a\x85b", "U+0085"),  # NEXT LINE
    ("a\x9bb", "U+009B"),  # C1 control (CSI)
    ("a\u2028b", "U+2028"),
    ("a\u2029b", "U+2029"),
    ("a\x1bb", "U+001B"),
    ("a\x7fb", "U+007F"),
    ("dir\u2028/file", "U+2028"),
    ("\ud800lone", "U+D800"),
    ("x" * 20000, "20000 bytes"),
    ("d/" + "n" * 256, "256 bytes"),
    ("é" * 128, "256 bytes"),  # 128 characters, but 256 bytes in UTF-8
    ("/".join(["abcd"] * 210), "1049 bytes"),  # short names, long path
]
NAMING_OPERATIONS = [
    ("file", lambda hub, name: _commit_body(_file_op(name, b"x"))),
    ("lfsFile", lambda hub, name: _commit_body(_lfs_op(name, hub.lfs_oid, 350))),
    ("deletedFile", lambda hub, name: _commit_body({"key": "deletedFile", "value": {"path": name}})),
    ("deletedFolder", lambda hub, name: _commit_body({"key": "deletedFolder", "value": {"path": name}})),
    ("preupload", lambda hub, name: json.dumps({"files": [{"path": name, "sample": "", "size": 1}]}).encode()),
]


@pytest.mark.parametrize("name,reason", BAD_NAMES, ids=[repr(n[:20]) for n, _ in BAD_NAMES])
@pytest.mark.parametrize("operation,make", NAMING_OPERATIONS, ids=[o for o, _ in NAMING_OPERATIONS])
def test_a_bad_file_name_is_refused_in_one_line_with_the_reason(hub, name, reason, operation, make):
    endpoint = "preupload" if operation == "preupload" else "commit"
    answer = request(hub, "POST", f"/api/models/alice/r1/{endpoint}/main", make(hub, name))
    assert_safe(answer)
    assert answer.status == 400, answer
    message = json.loads(answer.body)["error"]
    assert message.startswith("Invalid path in repository") and reason in message, message
    assert len(message) < 300 and message.isprintable(), message  # one short line, the name escaped
    tree = request(hub, "GET", "/api/models/alice/r1/tree/main?recursive=true", auth=False)
    assert name.encode("utf-8", "surrogatepass")[:50] not in tree.body


# (files already there, files the commit adds, files it deletes): each leaves a file beside a folder of the
# same name, or two names that are one after Unicode normalisation.
CLASHES = [
    (["x"], ["x/y"], []),
    (["x/y"], ["x"], []),
    ([], ["c", "c/d"], []),
    (["p/q/r"], ["p"], []),
    (["p/q/r"], ["p/q"], []),
    (["x", "x2/y"], ["x/y/z"], []),
    (["caf\u00e9.txt"], ["cafe\u0301.txt"], []),  # NFC, then NFD
    (["cafe\u0301.txt"], ["caf\u00e9.txt"], []),
    ([], ["\u00c5", "A\u030a"], []),
    (["\u00e9/a"], ["e\u0301/b"], []),  # folders
    (["\u212b"], ["\u00c5"], []),  # ANGSTROM SIGN: NFC-normalises to U+00C5
]


@pytest.mark.parametrize("existing,added,deleted", CLASHES)
def test_a_file_beside_a_folder_of_its_name_or_a_normalisation_twin_is_refused(hub, existing, added, deleted):
    name = f"clash{CLASHES.index((existing, added, deleted))}"
    assert request(hub, "POST", "/api/repos/create", json.dumps({"name": name}).encode()).status == 200
    if existing:
        first = _commit_body(*[_file_op(path, b"1") for path in existing])
        assert request(hub, "POST", f"/api/models/alice/{name}/commit/main", first).status == 200
    ops = [_file_op(path, b"2") for path in added] + [{"key": "deletedFile", "value": {"path": p}} for p in deleted]
    answer = request(hub, "POST", f"/api/models/alice/{name}/commit/main", _commit_body(*ops))
    assert_safe(answer)
    assert answer.status == 400, answer
    message = json.loads(answer.body)["error"]
    assert "folder" in message or "normalisation" in message, message
    listed = json.loads(request(hub, "GET", f"/api/models/alice/{name}/tree/main?recursive=true").body)
    assert sorted(item["path"] for item in listed if item["type"] == "file") == sorted([".gitattributes", *existing])


def test_a_file_may_become_a_folder_in_one_commit(hub):
    assert request(hub, "POST", "/api/repos/create", b'{"name": "reshape"}').status == 200
    assert (
        request(hub, "POST", "/api/models/alice/reshape/commit/main", _commit_body(_file_op("x", b"1"))).status == 200
    )
    ops = [{"key": "deletedFile", "value": {"path": "x"}}, _file_op("x/y", b"2")]
    assert request(hub, "POST", "/api/models/alice/reshape/commit/main", _commit_body(*ops)).status == 200
    assert request(hub, "GET", "/alice/reshape/resolve/main/x/y").body == b"2"


# ---------------------------------------------------------------------------------------------
# 10. Every request has a deadline; slow clients cannot keep others out; reads never wait for a lock.
# ---------------------------------------------------------------------------------------------

DEADLINE = 0.5  # the deadline server's request_timeout: short, so that these cases stay fast
BIG = 24 << 20  # an LFS file larger than any socket buffer, so a client that does not read stalls its answer


@pytest.fixture(scope="module")
def deadline_hub(tmp_path_factory):
    with LocalHub(
        tmp_path_factory.mktemp("deadline") / "hub",
        token=TOKEN,
        user="alice",
        **{**LIMITS, "request_timeout": DEADLINE},
    ) as server:
        server.lfs_oid = _populate(server)
        yield server


def _head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"Authorization: Bearer {TOKEN}"]
    return ("\r\n".join(lines + [f"{k}: {v}" for k, v in headers.items()]) + "\r\n\r\n").encode()


def _body_drip(method: str, path: str) -> tuple[bytes, bytes]:
    return _head(method, path, {"Content-Length": "100000"}), b'{"name": "' + b"a" * 2000


# Every stage at which a client can stall, and every endpoint that reads a body: (what is sent at once, what
# then follows a byte at a time, far faster than the deadline).
DRIPS = {
    "request-line": (b"", b"GET /api/models/alice/r1 HTTP/1.1" + b"1" * 2000),
    "headers": (b"GET /alice/r1/resolve/main/config.json HTTP/1.1\r\n", b"X-Slow: " + b"a" * 2000),
    "many-headers": (b"GET /api/models/alice/r1 HTTP/1.1\r\n", b"X: 1\r\n" * 400),
    "next-request-on-keep-alive": (b"GET /api/models/alice/r1 HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /api" + b"/" * 2000),
    "chunked-body": (_head("POST", "/api/repos/create", {"Transfer-Encoding": "chunked"}), b"7d0\r\n" + b"a" * 2000),
    "chunk-size-line": (_head("POST", "/api/repos/create", {"Transfer-Encoding": "chunked"}), b"0" * 1000),
    "paths-info-body": _body_drip("POST", "/api/models/alice/r1/paths-info/main"),
    "validate-yaml-body": _body_drip("POST", "/api/validate-yaml"),
    **{f"body-{method}-{path}": _body_drip(method, path) for method, path in WRITES if "lfs-upload" not in path},
    "lfs-upload-body": None,  # to a live upload URL, made in the test
}


def drip(
    hub: LocalHub, first: bytes, trickle: bytes, interval: float = 0.02, bound: float = 8.0
) -> tuple[float, bytes]:
    """Send `first`, then `trickle` a byte every `interval` s until the server closes (at most `bound` s).
    Returns (seconds from the first byte to the server's close, what it sent)."""
    host, port = hub.endpoint.removeprefix("http://").split(":")
    received = b""
    with socket.create_connection((host, int(port)), timeout=bound) as sock:
        start = time.monotonic()
        sock.sendall(first)
        for byte in itertools.chain(trickle, itertools.repeat(None)):
            if time.monotonic() - start > bound:
                break
            readable, _, _ = select.select([sock], [], [], interval)
            if readable:
                try:
                    data = sock.recv(65536)
                except ConnectionResetError:
                    break
                if not data:
                    break
                received += data
            if byte is not None:
                try:
                    sock.send(bytes([byte]))
                except OSError:
                    break
        return time.monotonic() - start, received


@pytest.mark.parametrize("stage", list(DRIPS))
def test_every_request_stage_has_a_deadline_not_a_per_read_timeout(deadline_hub, stage):
    if stage == "lfs-upload-body":
        url = _upload_url(deadline_hub, "alice/r1", b"z" * 5000)
        first, trickle = _head("PUT", url, {"Content-Length": "5000"}), b"z" * 5000
    else:
        first, trickle = DRIPS[stage]
    elapsed, answer = drip(deadline_hub, first, trickle)
    assert elapsed < DEADLINE + 1.5, (elapsed, answer)  # a byte every 20 ms would outlive any per-read timeout
    if b"408" in answer[:200]:
        assert b"within 0.5 s" in answer, answer


def test_a_client_that_does_not_read_its_download_is_cut_off_at_the_deadline(deadline_hub):
    oid = _upload(deadline_hub, "alice/r1", b"\1" * BIG)
    commit = _commit_body(_lfs_op("big.bin", oid, BIG))
    assert request(deadline_hub, "POST", "/api/models/alice/r1/commit/main", commit).status == 200
    host, port = deadline_hub.endpoint.removeprefix("http://").split(":")
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(10)
        sock.connect((host, int(port)))
        sock.sendall(b"GET /alice/r1/resolve/main/big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(DEADLINE + 2)  # not reading: the server's writes block
        received = 0
        while received <= BIG:
            try:
                data = sock.recv(1 << 20)
            except (ConnectionResetError, TimeoutError):
                break
            if not data:
                break
            received += len(data)
    assert received < BIG, received


def test_slow_clients_cannot_keep_everyone_out(tmp_path):
    # A long deadline, so that only making room (not the deadline) can let the new client in.
    with LocalHub(tmp_path / "hub", token=TOKEN, user="alice", **{**LIMITS, "request_timeout": 30}) as hub:
        _populate(hub)
        host, port = hub.endpoint.removeprefix("http://").split(":")
        cap = LIMITS["max_connections"]
        slow = [socket.create_connection((host, int(port)), timeout=5) for _ in range(cap)]
        try:
            for i, sock in enumerate(slow):  # half idle, half dripping a request line
                if i % 2:
                    sock.sendall(b"GET /api/models/al")
            time.sleep(0.7)
            for sock in slow[1::2]:
                sock.sendall(b"i")
            for _ in range(3):
                start = time.monotonic()
                answer = request(hub, "GET", "/alice/r1/resolve/main/config.json", auth=False)
                assert answer.status == 200 and answer.body == b"{}", answer
                assert time.monotonic() - start < 3
        finally:
            for sock in slow:
                sock.close()


def test_a_listing_never_waits_for_a_writer(hub):
    # A write holding the lock (a commit in progress) does not hold up a read, however long the read.
    answers: list[Answer] = []
    with hub.app._lock:
        reader = threading.Thread(
            target=lambda: answers.append(
                request(hub, "GET", "/api/models/alice/r1/tree/main?recursive=true&expand=true", auth=False, timeout=8)
            )
        )
        reader.start()
        reader.join(timeout=8)
        assert answers and answers[0].status == 200, answers
    assert {item["path"] for item in json.loads(answers[0].body)} >= {"config.json", "model.safetensors"}


def test_time_a_keep_alive_connection_spent_idle_is_not_taken_from_its_next_request(tmp_path):
    # Idle for 3/4 of the timeout, then a request sent over half of it: past the timeout counted from the
    # connection's start, well within it counted from the request's first byte.
    timeout = 2.0
    with LocalHub(tmp_path / "hub", token=TOKEN, user="alice", **{**LIMITS, "request_timeout": timeout}) as hub:
        _populate(hub)
        host, port = hub.endpoint.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            time.sleep(timeout * 0.75)
            data = b"GET /alice/r1/resolve/main/config.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            for i in range(10):
                sock.sendall(data[i * 4 : (i + 1) * 4])
                time.sleep(timeout / 20)
            sock.sendall(data[40:])
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"\r\n\r\n{}"), answer


# ---------------------------------------------------------------------------------------------
# 11. What `minibert push` publishes (issue 51): the files a model repository of the format consists of, never
#     the token, whether in a file, its name or the line that names what was left out.
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    """A fine-tuned Mini-BERT classifier's folder: model and its code files, tokenizer, results, card."""
    import torch

    from modeling_minibert import MiniBertConfig, MiniBertForSequenceClassification
    from modeling_minibert.sharing.model_card import write_model_card
    from tokenization import make_tokenizer

    folder = tmp_path_factory.mktemp("publish") / "clf"
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"]
    torch.manual_seed(0)
    config = MiniBertConfig(
        vocab_size=len(words),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    MiniBertForSequenceClassification(config).save_pretrained(folder)
    make_tokenizer({w: i for i, w in enumerate(words)}, model_max_length=16).save_pretrained(folder)
    (folder / "all_results.json").write_text('{"eval_accuracy": 0.5}')
    write_model_card(folder, task="text-classification")
    return folder


def _relabelled_as_bert_with_code(folder) -> None:
    """A folder that says `model_type: bert` but carries its own code and an `auto_map` naming it."""
    config = json.loads((folder / "config.json").read_text())
    config.update(
        model_type="bert",
        architectures=["BertForSequenceClassification"],
        auto_map={"AutoModelForSequenceClassification": "modeling_custom.CustomBert"},
    )
    for name in ("layer_norm_position", "final_layer_norm", "mlm_head_transform", "unpad_inputs", "sparse_prediction"):
        config.pop(name, None)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "modeling_custom.py").write_text("import os\nos.system('echo pwned')\n")


def _label(folder, name: str) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(id2label={"0": name, "1": "other"}, label2id={name: 0, "other": 1})
    (folder / "config.json").write_text(json.dumps(config))


CODE = ["configuration_minibert.py", "modeling_minibert.py", "checks_minibert.py"]
# (id, files added to the folder (or a function that changes it), push options, published, left out (named in the
# one warning line), or the refusal instead ({folder}: the folder pushed))
PUBLISHING = [
    ("a-script", {"run.sh": "python train.py\n", "train.py": "print()\n"}, {}, CODE, ["run.sh", "train.py"], None),
    (
        "bytecode",
        {"__pycache__/modeling_minibert.cpython-311.pyc": b"\0"},
        {},
        CODE,
        ["__pycache__/modeling_minibert.cpython-311.pyc"],
        None,
    ),
    (
        "notes",
        {"notes/todo.txt": "ask Bob\n", "data/train.csv": "a,b\n"},
        {},
        ["all_results.json"],
        ["data/train.csv", "notes/todo.txt"],
        None,
    ),
    ("bert-format-has-no-code", {}, {"format": "bert"}, ["config.json", "model.safetensors", "vocab.txt"], [], None),
    (
        "bert-format-script-and-bytecode",
        {"run.sh": "", "__pycache__/x.pyc": b"\0"},
        {"format": "bert"},
        ["all_results.json"],
        ["__pycache__/x.pyc", "run.sh"],
        None,
    ),
    (
        "bert-labelled-folder-with-code",
        _relabelled_as_bert_with_code,
        {"format": "bert"},
        ["config.json"],
        CODE,
        None,
    ),  # modeling_custom.py, which its auto_map names, is replaced; the files nothing names are left out
    ("pickle-not-asked", {"extra.pt": b"pickle"}, {}, None, None, r"holds pickle files \(extra.pt\)"),
    ("pickle-asked", {"extra.pt": b"pickle"}, {"allow_pickle": True}, ["extra.pt", *CODE], [], None),
    (
        "pickle-in-bert-format",
        {"extra.pt": b"pickle"},
        {"format": "bert", "allow_pickle": True},
        ["model.safetensors"],
        ["extra.pt"],
        None,
    ),
    (
        "token-in-a-tensorboard-run-name",
        {f"runs/{TOKEN}/events.out.tfevents.1.host": b"tb"},
        {},
        None,
        None,
        r"a file name in .*clf contains your Hub token: it would be published \(runs/hf_\*\*\*/events",
    ),
    (
        "token-in-a-plot-name",
        {f"curves-{TOKEN}.png": b"png"},
        {"format": "bert"},
        None,
        None,
        r"a file name in .*clf contains your Hub token: it would be published \(curves-hf_\*\*\*.png\)",
    ),
    (
        "token-in-a-results-file-bert-format",
        {"eval_results.json": f'{{"note": "{TOKEN}"}}'},
        {"format": "bert"},
        None,
        None,
        r"^{folder}/eval_results.json contains your Hub token",
    ),  # the user's file, not a temporary copy
    (
        "token-in-a-label",
        lambda f: _label(f, TOKEN),
        {"format": "bert"},
        None,
        None,
        r"^{folder}/config.json \(its BERT-format copy\) contains your Hub token",
    ),
    ("token-in-a-name-left-out", {f"notes-{TOKEN}.txt": "x"}, {}, CODE, ["notes-hf_***.txt"], None),
]


@pytest.mark.parametrize("name,change,options,published,left_out,refusal", PUBLISHING, ids=[r[0] for r in PUBLISHING])
def test_a_push_publishes_only_a_model_repository_and_never_the_token(
    hub, model_folder, tmp_path, monkeypatch, caplog, name, change, options, published, left_out, refusal
):
    import shutil

    from huggingface_hub import constants

    from modeling_minibert.sharing.push import push_to_hub

    for setting, value in (
        ("HF_HUB_DISABLE_XET", True),
        ("HF_HUB_OFFLINE", False),
        ("HF_HUB_DISABLE_TELEMETRY", True),
    ):
        monkeypatch.setattr(constants, setting, value)
    folder = tmp_path / "clf"
    shutil.copytree(model_folder, folder)
    if callable(change):
        change(folder)
    for path, content in (change if isinstance(change, dict) else {}).items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(content if isinstance(content, bytes) else content.encode())
    repo = f"alice/published-{name}"
    with caplog.at_level(logging.WARNING, logger="modeling_minibert"):
        if refusal is not None:
            with pytest.raises(ValueError, match=refusal.replace("{folder}", re.escape(str(folder)))) as err:
                push_to_hub(folder, repo, token=TOKEN, endpoint=hub.endpoint, **options)
            assert TOKEN not in str(err.value) and "\n" not in str(err.value)
            with pytest.raises(KeyError, match="No model repository"):  # the Hub was never asked
                hub.repo_files(repo)
            return
        push_to_hub(folder, repo, token=TOKEN, endpoint=hub.endpoint, **options)
    files = hub.repo_files(repo)
    assert set(published) <= set(files), sorted(files)
    assert not {path.replace("hf_***", TOKEN) for path in left_out} & set(files), sorted(files)
    assert not [path for path in files if path.endswith((".pyc", ".sh"))], sorted(files)
    if options.get("format") == "bert":  # no code (the format's classes replace it: not named as left out)
        assert not [path for path in files if path.endswith(".py")] and b"auto_map" not in files["config.json"]
    assert all(TOKEN.encode() not in content and TOKEN not in path for path, content in files.items())
    lines = [record.getMessage() for record in caplog.records if "left out" in record.getMessage()]
    if left_out:
        (line,) = lines
        assert line.startswith(f"left out {len(left_out)} file(s)") and all(path in line for path in left_out), line
    else:
        assert not lines, lines
    assert TOKEN not in caplog.text
