"""A local stand-in for the Hugging Face Hub: the HTTP API subset that push and pull use.

`huggingface_hub` talks HTTP through its own client (httpx2), so request-mocking libraries cannot
intercept it; the dependable way to exercise `push_to_hub` / `from_pretrained` offline is a real
server speaking the Hub's API. `LocalHub` is that server: threaded, on 127.0.0.1, storing its
repositories in a folder so a demo's pushes survive a restart.

    with LocalHub("hub-data") as hub:
        env = hub.environment()    # HF_ENDPOINT, HF_TOKEN, HF_HUB_DISABLE_XET=1: for a fresh process, or
        hub.configure_clients()    # point this process's huggingface_hub and transformers here
        model.push_to_hub("my-model")          # -> local-user/my-model

or, from a shell: `python -m tools.local_hub hub-data` (prints the variables to export).

What it stores, under `root_dir`:
  - `repos/{type}/{namespace}/{name}.json`: branches, tags, pull-request refs and commits; each
    commit holds the full file snapshot of the repository (path -> size, git oid, LFS sha256);
  - `objects/{git sha1}`: contents of regular (git) files; `lfs/{sha256}`: LFS objects.

What it speaks (the calls huggingface_hub 2.4 and transformers 5.x make for push and pull):
  - `GET /api/whoami-v2`, `POST /api/repos/create` (409 if it exists), `DELETE /api/repos/delete`,
    `POST /api/validate-yaml`;
  - `/api/{type}s/{repo}`: info (`/revision/{rev}`), `/tree/{rev}[/{path}]`, `/paths-info/{rev}`,
    `/refs`, `/commits/{rev}`, `/branch/{name}`, `/tag/{rev}`, `/preupload/{rev}`, `/commit/{rev}`;
  - the Git LFS batch API `/{repo}.git/info/lfs/objects/batch` (+ `/verify`), whose upload
    targets are one-time URLs on this server, like the Hub's pre-signed storage URLs;
  - `HEAD`/`GET /{repo}/resolve/{rev}/{path}` with `X-Repo-Commit`, `ETag`, `X-Linked-Etag`,
    `X-Linked-Size` and Range support.
Errors carry `X-Error-Code` (`RepoNotFound`, `RevisionNotFound`, `EntryNotFound`) and
`X-Error-Message`, from which the client raises its own exception types.

Writes need `Authorization: Bearer <token>`; a wrong token gets 401 on any request. The server
never logs request headers, so the token appears in no log line.

It is meant for one machine, but anyone who can reach the port must not be able to turn it against
its host: a request's body is judged by its headers before a byte is read (too large: 413, malformed
framing: 400, a write without a token: 401) and capped; every request has a deadline (`request_timeout`
seconds from its first byte to the last byte of its answer; an idle connection waits as long), so a client
that stalls or drips bytes is cut off; at most `max_connections` are served at once, and beyond that the slowest waiting one
makes room (503 only when every slot is at work); reads take no lock and listings are linear in the file
count, so no request holds up the others; object ids are hex digests and every stored file is looked up by
one, never by a path taken from a request; an LFS object is reachable only from the repository it was
uploaded to (its bytes checked on arrival), and no answer tells whether another repository holds one; upload
URLs are for a writer, one object of at most `max_lfs_size` bytes, used once, within `upload_ttl` seconds;
file names are refused (400, one line with the reason) when they hold control, bidi or line-separator
characters, are too long, or clash with another file (`x` beside `x/y`, NFC beside NFD); no request data
reaches a response header with a control character in it; and malformed JSON of any shape is a 400.
tests/test_local_hub_security.py holds the cases.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import dataclasses
import fnmatch
import hashlib
import hmac
import io
import json
import logging
import os
import re
import secrets
import socket
import sys
import threading
import time
import unicodedata
import uuid
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import yaml

from modeling_minibert.checks_minibert import read_safetensors_header
from modeling_minibert.files import temp_file_beside, write_bytes, write_text
from modeling_minibert.model_card import HEADS  # architecture suffix -> (Auto class, pipeline tag), from AUTO_MAP

logger = logging.getLogger(__name__)

REPO_TYPES = ("model", "dataset", "space")
DEFAULT_BRANCH = "main"
# The Hub stores these in LFS whatever .gitattributes says (huggingface_hub's docs: "files larger than 10MB").
LFS_SIZE_THRESHOLD = 10 * 1024 * 1024
# The `.gitattributes` the Hub writes in a new repository's initial commit.
DEFAULT_GITATTRIBUTES = "".join(
    f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
    for pattern in (
        "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gz", "*.h5", "*.joblib", "*.lfs.*",
        "*.mlmodel", "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.ot", "*.parquet", "*.pb",
        "*.pickle", "*.pkl", "*.pt", "*.pth", "*.rar", "*.safetensors", "saved_model/**/*", "*.tar.*",
        "*.tar", "*.tflite", "*.tgz", "*.wasm", "*.xz", "*.zip", "*.zst", "*tfevents*",
    )
)
_REPO_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?$")
_COMMIT_ID = re.compile(r"^[0-9a-f]{40}$")
# Stored files are named by these and nothing else: git blob sha1s in objects/, sha256s in lfs/.
_OBJECT_IDS = {"objects": re.compile(r"[0-9a-f]{40}"), "lfs": re.compile(r"[0-9a-f]{64}")}
_REF_NAME = re.compile(r"[A-Za-z0-9._/-]+")
# Anything but printable ASCII in a header value could end the header (CR, LF) or confuse a client (NUL).
_UNSAFE_IN_HEADER = re.compile(r"[^\x20-\x7e]")
DEFAULT_MAX_BODY_SIZE = 64 * 1024 * 1024  # LFS uploads are capped by their declared size instead
# The largest LFS object an upload URL is given for: ample for a demo, and a bound on what one client can make
# the server write to disk (the Hub itself takes up to 50 GB per file).
DEFAULT_MAX_LFS_SIZE = 5 * 1024**3
DEFAULT_UPLOAD_TTL = 900.0  # seconds an LFS upload URL stays valid, like the Hub's pre-signed storage URLs
DEFAULT_MAX_CONNECTIONS = 32
# Seconds a request may take from its first byte to the last byte of its answer (not per read: a client dripping
# a byte at a time would otherwise hold its connection forever); an idle keep-alive connection waits as long.
DEFAULT_REQUEST_TIMEOUT = 30.0
ANSWER_GRACE = 1.0  # seconds past the deadline an answer (a 408 included) may still take to leave
# When every slot is taken, a new client takes the slot of the connection that sends slowest (idle keep-alive
# first, then byte-drippers) among those waiting for a request for at least this long; 503 only if none is.
EVICTABLE_AFTER = 0.5
# File names in a repository: what every filesystem a download lands on holds (255 bytes a name), and a bound on
# the whole path that leaves room for a cache folder in front of it.
MAX_NAME_BYTES, MAX_PATH_BYTES = 255, 1024
LINGER_SECONDS, LINGER_BYTES = 1.0, 1 << 20  # what a closing connection reads of a client's unwanted input
# The one message for which huggingface_hub does *not* turn a 401 into RepositoryNotFoundError.
_BAD_TOKEN_MESSAGE = "Invalid credentials in Authorization header"
_XET_MESSAGE = (
    "This local hub speaks plain Git LFS, not Xet: set HF_HUB_DISABLE_XET=1 before huggingface_hub is imported"
)


# ---------------------------------------------------------------------------------------------
# Data model: a repository is refs + commits; a commit is a full snapshot of file entries.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FileEntry:
    """One file in a commit's snapshot. `oid` is the git blob sha1 (of the pointer, for LFS files)."""

    size: int
    oid: str
    lfs_sha256: str | None = None
    pointer_size: int | None = None

    @property
    def is_lfs(self) -> bool:
        return self.lfs_sha256 is not None


@dataclasses.dataclass
class Commit:
    id: str
    parents: list[str]
    title: str
    message: str
    date: str
    author: str
    files: dict[str, FileEntry]


@dataclasses.dataclass
class Repo:
    """Requests read a repository without the server's lock, so writers never change a table a reader may be
    going through: they put a new dict in place (`branches`, `tags`, `pull_requests`, `lfs_objects`), add a
    commit before any ref names it, and never touch a commit's `files` after it is made."""

    repo_type: str
    repo_id: str
    private: bool
    created_at: str
    branches: dict[str, str]
    tags: dict[str, str]
    pull_requests: dict[str, str]  # "refs/pr/N" -> commit id
    commits: dict[str, Commit]
    # The LFS objects this repository may point at: those uploaded through its own batch URLs (their bytes checked
    # on arrival). Another repository's object is not reachable by naming its sha256.
    lfs_objects: frozenset[str] = frozenset()

    @property
    def namespace(self) -> str:
        return self.repo_id.split("/")[0]

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "lfs_objects": sorted(self.lfs_objects)}

    @classmethod
    def from_json(cls, data: dict) -> Repo:
        commits = {
            cid: Commit(**{**c, "files": {p: FileEntry(**f) for p, f in c["files"].items()}})
            for cid, c in data["commits"].items()
        }
        # A repository saved before uploads were recorded may point at what its commits already hold.
        committed = {f.lfs_sha256 for c in commits.values() for f in c.files.values() if f.lfs_sha256}
        return cls(**{**data, "commits": commits, "lfs_objects": frozenset(data.get("lfs_objects", committed))})


@dataclasses.dataclass(frozen=True)
class UploadTicket:
    """What a one-time LFS upload URL lets its holder do: send these bytes to this repository, until `expires`."""

    sha256: str
    size: int
    repo: tuple[str, str]  # (type, id)
    expires: float  # time.monotonic()


def git_blob_oid(content: bytes) -> str:
    """The sha1 git gives a blob: what the Hub reports as a regular file's oid and ETag."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The small text git stores in place of an LFS file."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _lfs_patterns(gitattributes: str) -> list[str]:
    return [line.split()[0] for line in gitattributes.splitlines() if "filter=lfs" in line and line.split()]


def _matches(path: str, patterns: list[str]) -> bool:
    """gitattributes/gitignore-style matching: a pattern without '/' matches the file name."""
    name = path.rsplit("/", 1)[-1]
    for pattern in patterns:
        if "/" in pattern.rstrip("/"):
            if fnmatch.fnmatchcase(path, pattern.lstrip("/")):
                return True
        elif fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(path, pattern.rstrip("/") + "/*"):
            return True
    return False


# Unicode categories no file name needs: controls (C0, DEL, C1 such as U+0085 NEXT LINE), format characters (bidi
# overrides and isolates, zero-width characters, BOM), lone surrogates, and the line and paragraph separators
# (U+2028, U+2029). Each can make a listing show one name and a download write another.
_UNSAFE_CATEGORIES = {"Cc": "a control character", "Cf": "an invisible formatting (e.g. bidirectional) character",
                      "Cs": "a lone surrogate", "Zl": "a line separator", "Zp": "a paragraph separator"}


def _path_problem(path: str) -> str | None:
    """Why `path` cannot name a file in a repository, or None."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return "empty, '.' and '..' parts are not allowed"
    if parts[0] == ".git" or "\\" in path:
        return "'.git' and backslashes are not allowed"
    size = len(path.encode("utf-8", "surrogatepass"))  # first: it bounds the work below
    if size > MAX_PATH_BYTES:
        return f"it is {size} bytes long in UTF-8, over the limit of {MAX_PATH_BYTES}"
    for char in path:
        category = unicodedata.category(char)
        if category in _UNSAFE_CATEGORIES:
            return f"it contains U+{ord(char):04X}, {_UNSAFE_CATEGORIES[category]}"
    longest = max(parts, key=lambda p: len(p.encode()))
    if len(longest.encode()) > MAX_NAME_BYTES:
        return f"its part {_shown(longest)} is {len(longest.encode())} bytes long, over the limit of {MAX_NAME_BYTES}"
    return None


def _shown(text: str, limit: int = 60) -> str:
    """`text` for a one-line message: escaped by repr, and cut if long."""
    return repr(text[:limit]) + (f"... ({len(text)} characters)" if len(text) > limit else "")


def _validate_path(path: object) -> str:
    if not isinstance(path, str):
        raise HubError(400, f"A path in a repository must be a string, not {type(path).__name__}")
    problem = _path_problem(path)
    if problem:
        raise HubError(400, f"Invalid path in repository {_shown(path)}: {problem}")
    return path


def _tree_conflicts(files: Mapping[str, FileEntry], added: set[str]) -> str | None:
    """Why a snapshot cannot be checked out, for a conflict involving an added path, or None.

    A file `x` beside a file `x/y` (no filesystem holds both), or two names that differ only in Unicode
    normalisation (NFC "é" and NFD "e" + U+0301: one file on macOS, two in the listing). Linear in the file count.
    """
    folders: dict[str, str] = {}  # folder -> a file under it, an added one if there is one
    for path in files:
        parts = path.split("/")
        for i in range(1, len(parts)):
            if path in added or "/".join(parts[:i]) not in folders:
                folders["/".join(parts[:i])] = path
    for folder, inside in folders.items():
        if folder in files and (folder in added or inside in added):
            return f"file {_shown(folder)} would also be a folder holding {_shown(inside)}"
    seen: dict[str, str] = {}  # NFC form -> the first name (file or folder) that has it
    for name, inside in sorted({**folders, **{path: path for path in files}}.items()):
        twin = seen.setdefault(unicodedata.normalize("NFC", name), name)
        if twin != name and (inside in added or folders.get(twin, twin) in added):
            return f"{_shown(name)} and {_shown(twin)} differ only in Unicode normalisation (NFC/NFD)"
    return None


def _sha256(oid: str) -> str:
    if not _OBJECT_IDS["lfs"].fullmatch(oid):
        raise HubError(400, f"Invalid LFS oid {oid[:100]!r}: expected a sha256, 64 lowercase hex digits")
    return oid


def _valid_ref(name: str) -> bool:
    """Branch and tag names: no empty, '.' or '..' parts (git's rules, in short)."""
    return bool(_REF_NAME.fullmatch(name)) and all(part not in ("", ".", "..") for part in name.split("/"))


_REQUIRED = object()


def _field(data: Mapping, name: str, kind: type | tuple[type, ...], default: Any = _REQUIRED, where: str = "") -> Any:
    """`data[name]` checked against `kind`; `default` when it is missing or null (a 400 if there is none)."""
    value = data.get(name)
    if value is None:
        if default is _REQUIRED:
            raise HubError(400, f"{where or 'Request body'}: missing field {name!r}")
        return default
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, (int,))):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise HubError(400, f"{where or 'Request body'}: field {name!r} must be {names}, not {type(value).__name__}")
    return value


def _list_of(values: list, kind: type, name: str) -> list:
    if not all(isinstance(v, kind) for v in values):
        raise HubError(400, f"Request body: every item of {name!r} must be {kind.__name__}")
    return values


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _safetensors_parameter_count(path: Path) -> dict[str, int] | None:
    """Parameters per dtype from a safetensors header (8-byte length, then JSON), like the Hub's `safetensors` info."""
    try:
        header = read_safetensors_header(path)
    except (OSError, ValueError):
        return None
    counts: dict[str, int] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        n = 1
        for dim in info["shape"]:
            n *= dim
        counts[info["dtype"]] = counts.get(info["dtype"], 0) + n
    return counts


def _parameter_count(path: Path) -> dict[str, int] | None:
    try:
        return _safetensors_parameter_count(path)
    except (TypeError, KeyError, AttributeError):  # a header of the wrong shape: no count, as on the Hub
        return None


# ---------------------------------------------------------------------------------------------
# Requests, responses and errors, independent of the HTTP plumbing.
# ---------------------------------------------------------------------------------------------


class HubError(Exception):
    """An HTTP error answer: status, message (sent as JSON `error` and `X-Error-Message`) and Hub error code."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code
        self.headers = dict(headers or {})
        self.body = dict(body or {})  # extra JSON fields next to "error"


def _parse_json(data: bytes | str, what: str) -> Any:
    try:
        return json.loads(data, parse_constant=_reject_constant)  # strict: no NaN / Infinity
    except (ValueError, RecursionError) as err:
        raise HubError(400, f"{what} is not valid JSON: {err}") from None


@dataclasses.dataclass
class Request:
    method: str
    segments: list[str]  # percent-decoded path segments
    query: dict[str, list[str]]
    headers: Mapping[str, str]
    body: bytes
    # An LFS upload's body, streamed to a file under the root instead of memory: (path, sha256, size).
    upload: tuple[Path, str, int] | None = None

    def json(self) -> dict:
        """The body as a JSON object (every endpoint takes one); anything else is the client's error, a 400."""
        data = _parse_json(self.body or b"{}", "Request body")
        if not isinstance(data, dict):
            raise HubError(400, f"Request body must be a JSON object, not {type(data).__name__}")
        return data

    def flag(self, name: str) -> bool:
        return self.query.get(name, ["false"])[-1].lower() in ("1", "true")


@dataclasses.dataclass
class Response:
    status: int = 200
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    body: bytes = b""
    file: Path | None = None  # streamed instead of `body`, from `start` for `length` bytes
    start: int = 0
    length: int = 0

    @classmethod
    def json(cls, data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
        return cls(status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(data).encode())


def _repo_not_found(repo_id: str, status: int = 404) -> HubError:
    return HubError(status, f"Repository not found: {repo_id}", "RepoNotFound")


def _revision_not_found(repo: Repo, revision: str) -> HubError:
    message = f"Invalid rev id: {revision} (no such branch, tag or commit in {repo.repo_id})"
    return HubError(404, message, "RevisionNotFound")


def _entry_not_found(path: str, revision: str, commit_id: str | None = None) -> HubError:
    headers = {"X-Repo-Commit": commit_id} if commit_id else {}
    return HubError(404, f"Entry not found: {path} does not exist at revision {revision}", "EntryNotFound", headers)


# ---------------------------------------------------------------------------------------------
# The application: state under one lock, one method per endpoint.
# ---------------------------------------------------------------------------------------------


class HubApp:
    """The Hub's behaviour over a folder. `handle(request)` is thread-safe: writes take `self._lock` one at a time;
    reads take no lock (see `Repo`), so a long listing never holds up another request."""

    def __init__(
        self,
        root_dir: str | os.PathLike,
        tokens: Mapping[str, str],
        orgs: Mapping[str, list[str]],
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        max_lfs_size: int = DEFAULT_MAX_LFS_SIZE,
        upload_ttl: float = DEFAULT_UPLOAD_TTL,
    ):
        self.root = Path(root_dir).resolve()
        self.max_body_size, self.max_lfs_size, self.upload_ttl = max_body_size, max_lfs_size, upload_ttl
        self.tokens = dict(tokens)  # token -> user name
        self.orgs = {user: list(names) for user, names in orgs.items()}  # user -> organisations they write to
        self.endpoint = ""  # set by the server once it knows its port
        self._lock = threading.RLock()
        self._upload_tickets: dict[str, UploadTicket] = {}  # one-time LFS upload URL id -> what it admits
        for sub in ("repos", "objects", "lfs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.repos: dict[tuple[str, str], Repo] = {}
        for path in sorted((self.root / "repos").glob("*/*/*.json")):
            repo = Repo.from_json(json.loads(path.read_text()))
            self.repos[(repo.repo_type, repo.repo_id)] = repo

    # -- storage -------------------------------------------------------------------------------

    def _inside(self, path: Path) -> Path:
        """`path`, resolved, if it lies under the root; request data never names a file anywhere else."""
        resolved = path.resolve()
        if not resolved.is_relative_to(self.root):
            raise HubError(400, "Invalid name: it points outside the hub's storage")
        return resolved

    def _save(self, repo: Repo) -> None:
        path = self._inside(self.root / "repos" / repo.repo_type / f"{repo.repo_id}.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(repo.to_json(), indent=1))

    def _store_blob(self, content: bytes) -> str:
        oid = git_blob_oid(content)
        path = self._object_path("objects", oid)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            write_bytes(path, content)
        return oid

    def _object_path(self, store: str, oid: object) -> Path:
        """The stored file of an object: `objects/{sha1}` or `lfs/{sha256}`, for well-formed ids only."""
        if not isinstance(oid, str) or not _OBJECT_IDS[store].fullmatch(oid):
            raise HubError(404, f"Stored file has an invalid object id: not a {store} digest", "EntryNotFound")
        return self._inside(self.root / store / oid)

    def _content_path(self, entry: FileEntry) -> Path:
        return self._object_path("lfs", entry.lfs_sha256) if entry.is_lfs else self._object_path("objects", entry.oid)

    def _read(self, entry: FileEntry) -> bytes:
        return self._content_path(entry).read_bytes()

    def _read_or_none(self, entry: FileEntry | None) -> bytes | None:
        """Contents for what the server derives from files (card data, config); None if unreadable."""
        if entry is None:
            return None
        try:
            return self._read(entry)
        except (HubError, OSError):
            return None

    # -- auth and lookups ----------------------------------------------------------------------

    def _user(self, request: Request) -> str | None:
        header = request.headers.get("Authorization")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        for known, user in self.tokens.items():
            if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), known.encode()):
                return user
        raise HubError(401, _BAD_TOKEN_MESSAGE)

    def _require_user(self, request: Request) -> str:
        user = self._user(request)
        if user is None:
            raise HubError(401, "Authentication required: send a write token in the Authorization header")
        return user

    def _may_write(self, user: str | None, namespace: str) -> bool:
        return user is not None and (namespace == user or namespace in self.orgs.get(user, []))

    def _repo(self, request: Request, repo_type: str, repo_id: str, *, write: bool = False) -> Repo:
        user = self._require_user(request) if write else self._user(request)
        repo = self.repos.get((repo_type, repo_id))
        if repo is None or (repo.private and not self._may_write(user, repo.namespace)):
            # Like the Hub: a private repo someone may not see is reported as missing (401 if anonymous).
            raise _repo_not_found(repo_id, 401 if user is None else 404)
        if write and not self._may_write(user, repo.namespace):
            raise HubError(403, f"You don't have the rights to write to {repo_id}")
        return repo

    def _resolve(self, repo: Repo, revision: str) -> str:
        revision = revision or DEFAULT_BRANCH
        for prefix, refs in (("refs/heads/", repo.branches), ("refs/tags/", repo.tags)):
            if revision.startswith(prefix) and revision[len(prefix):] in refs:
                return refs[revision[len(prefix):]]
        if revision in repo.pull_requests:
            return repo.pull_requests[revision]
        if revision in repo.branches:
            return repo.branches[revision]
        if revision in repo.tags:
            return repo.tags[revision]
        if _COMMIT_ID.match(revision) and revision in repo.commits:
            return revision
        raise _revision_not_found(repo, revision)

    def _first_parent_history(self, repo: Repo, commit_id: str) -> Iterator[Commit]:
        while commit_id:
            commit = repo.commits[commit_id]
            yield commit
            commit_id = commit.parents[0] if commit.parents else ""

    # -- dispatch ------------------------------------------------------------------------------

    def admit(self, request: Request, length: int | None) -> int:
        """Judge a request by its line and headers, before its body is read; return the body's size limit.

        `length` is the declared Content-Length (None for a chunked body). Raises the HubError to answer
        instead: 403 for an unknown upload URL, 413 for a body over the limit, 401 for a write without a
        (valid) token. So an anonymous client cannot make the server hold a large body in memory.
        """
        seg, method = request.segments, request.method
        if seg[:1] == ["lfs-upload"] and len(seg) == 2 and method == "PUT":
            with self._lock:
                ticket = self._live_ticket(seg[1])
            if length is not None and length > ticket.size:
                raise HubError(413, f"This upload URL takes {ticket.size} bytes, not {length}")
            return ticket.size
        if length is not None and length > self.max_body_size:
            raise HubError(413, f"Request body of {length} bytes is over this hub's limit of {self.max_body_size} "
                                "bytes")
        if self._reads_only(request):
            self._user(request)  # a wrong token is refused on any request
        else:
            self._require_user(request)
        return self.max_body_size

    @staticmethod
    def _reads_only(request: Request) -> bool:
        seg, method = request.segments, request.method
        return method in ("GET", "HEAD") or method == "POST" and (
            seg == ["api", "validate-yaml"] or (len(seg) >= 5 and seg[0] == "api" and seg[4] == "paths-info"))

    def handle(self, request: Request) -> Response:
        if self._reads_only(request):
            return self._route(request)
        with self._lock:
            return self._route(request)

    def _route(self, request: Request) -> Response:
        seg, method = request.segments, request.method
        if seg[:1] == ["api"]:
            return self._route_api(request, seg[1:], method)
        if seg[:1] == ["lfs-upload"] and len(seg) == 2 and method == "PUT":
            return self._lfs_put(request, seg[1])
        repo_type, rest = ("model", seg)
        if seg and seg[0] in ("datasets", "spaces"):
            repo_type, rest = seg[0][:-1], seg[1:]
        if len(rest) == 6 and rest[1].endswith(".git") and rest[2:5] == ["info", "lfs", "objects"]:
            repo_id = f"{rest[0]}/{rest[1][:-4]}"
            if rest[5] == "batch" and method == "POST":
                return self._lfs_batch(request, repo_type, repo_id)
            if rest[5] == "verify" and method == "POST":
                return self._lfs_verify(request, repo_type, repo_id)
        if len(rest) >= 5 and rest[2] == "resolve" and method in ("GET", "HEAD"):
            return self._resolve_file(request, repo_type, f"{rest[0]}/{rest[1]}", rest[3], "/".join(rest[4:]))
        raise HubError(404, f"The local hub does not implement {method} /{'/'.join(seg)}")

    def _route_api(self, request: Request, seg: list[str], method: str) -> Response:
        if seg == ["whoami-v2"] and method == "GET":
            return self._whoami(request)
        if seg == ["repos", "create"] and method == "POST":
            return self._create_repo(request)
        if seg == ["repos", "delete"] and method == "DELETE":
            return self._delete_repo(request)
        if seg == ["validate-yaml"] and method == "POST":
            return self._validate_yaml(request)
        if len(seg) >= 3 and seg[0] in ("models", "datasets", "spaces"):
            repo_type, repo_id, rest = seg[0][:-1], f"{seg[1]}/{seg[2]}", seg[3:]
            action, args = (rest[0], rest[1:]) if rest else ("", [])
            if action.startswith("xet-"):
                raise HubError(501, _XET_MESSAGE)
            routes = {
                ("GET", ""): lambda: self._info(request, repo_type, repo_id, DEFAULT_BRANCH),
                ("GET", "revision"): lambda: self._info(request, repo_type, repo_id, "/".join(args)),
                ("GET", "tree"): lambda: self._tree(request, repo_type, repo_id, args[0], "/".join(args[1:])),
                ("POST", "paths-info"): lambda: self._paths_info(request, repo_type, repo_id, args[0]),
                ("GET", "refs"): lambda: self._refs(request, repo_type, repo_id),
                ("GET", "commits"): lambda: self._commits(request, repo_type, repo_id, "/".join(args)),
                ("POST", "branch"): lambda: self._create_branch(request, repo_type, repo_id, "/".join(args)),
                ("DELETE", "branch"): lambda: self._delete_ref(request, repo_type, repo_id, "branch", "/".join(args)),
                ("POST", "tag"): lambda: self._create_tag(request, repo_type, repo_id, "/".join(args)),
                ("DELETE", "tag"): lambda: self._delete_ref(request, repo_type, repo_id, "tag", "/".join(args)),
                ("POST", "preupload"): lambda: self._preupload(request, repo_type, repo_id, "/".join(args)),
                ("POST", "commit"): lambda: self._commit(request, repo_type, repo_id, "/".join(args)),
            }
            route = routes.get((method, action))
            if route is not None and (action in ("", "refs") or args):
                return route()
        raise HubError(404, f"The local hub does not implement {method} /api/{'/'.join(seg)}")

    # -- account and repositories --------------------------------------------------------------

    def _whoami(self, request: Request) -> Response:
        user = self._user(request)
        if user is None:
            raise HubError(401, "Authentication required: send a token in the Authorization header")
        orgs = [{"type": "org", "name": name} for name in self.orgs.get(user, [])]
        return Response.json({
            "type": "user", "id": hashlib.sha1(user.encode()).hexdigest()[:24], "name": user, "fullname": user,
            "email": None, "emailVerified": False, "isPro": False, "orgs": orgs,
            "auth": {"type": "access_token", "accessToken": {"displayName": "local-hub", "role": "write"}},
        })

    def _create_repo(self, request: Request) -> Response:
        user = self._require_user(request)
        payload = request.json()
        repo_type, name, namespace = self._repo_fields(payload, user)
        if repo_type not in REPO_TYPES:
            raise HubError(400, f"Invalid repo type {repo_type!r}: expected one of {REPO_TYPES}")
        if not _REPO_NAME.match(name) or "--" in name or ".." in name:
            raise HubError(400, f"Invalid repo name {name!r}: letters, digits, '-', '_', '.'; at most 96 characters")
        if not self._may_write(user, namespace):
            raise HubError(403, f"You don't have the rights to create a {repo_type} under the namespace {namespace!r}")
        repo_id = f"{namespace}/{name}"
        url = self._repo_url(repo_type, repo_id)
        if (repo_type, repo_id) in self.repos:
            # The client reads the existing repo's URL from this answer (create_repo(exist_ok=True)).
            raise HubError(409, f"You already created this {repo_type} repo: {repo_id}", body={"url": url})
        private = _field(payload, "private", bool, False)
        visibility = _field(payload, "visibility", str, "private" if private else "public")
        if visibility not in ("public", "private"):
            raise HubError(400, f"Invalid visibility {visibility!r}: 'public' or 'private'")
        private = visibility == "private"
        now = _now()
        oid = self._store_blob(DEFAULT_GITATTRIBUTES.encode())
        first = Commit(
            id=hashlib.sha1(f"{repo_type}/{repo_id}/{now}/{uuid.uuid4()}".encode()).hexdigest(), parents=[],
            title="initial commit", message="", date=now, author=user,
            files={".gitattributes": FileEntry(size=len(DEFAULT_GITATTRIBUTES), oid=oid)},
        )
        repo = Repo(repo_type, repo_id, private, now, {DEFAULT_BRANCH: first.id}, {}, {}, {first.id: first})
        self.repos[(repo_type, repo_id)] = repo
        self._save(repo)
        return Response.json({"url": url, "name": repo_id, "id": repo_id})

    def _delete_repo(self, request: Request) -> Response:
        user = self._require_user(request)
        repo_type, name, namespace = self._repo_fields(request.json(), user)
        repo = self._repo(request, repo_type, f"{namespace}/{name}", write=True)
        del self.repos[(repo.repo_type, repo.repo_id)]
        (self.root / "repos" / repo.repo_type / f"{repo.repo_id}.json").unlink()
        return Response.json({})

    @staticmethod
    def _repo_fields(payload: dict, user: str) -> tuple[str, str, str]:
        """(type, name, namespace) of a create/delete request; the namespace defaults to the token's user."""
        repo_type = _field(payload, "type", str, "model")
        name = _field(payload, "name", str)
        namespace = _field(payload, "organization", str, user)
        if not _REPO_NAME.match(namespace):
            raise HubError(400, f"Invalid namespace {namespace!r}: letters, digits, '-', '_', '.'")
        return repo_type, name, namespace

    def _validate_yaml(self, request: Request) -> Response:
        content = _field(request.json(), "content", str)
        match = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", content, flags=re.DOTALL)
        if match is None:
            warning = {"message": "Empty or missing yaml metadata in repo card"}
            return Response.json({"errors": [], "warnings": [warning]})
        try:
            data = yaml.safe_load(match.group(1))
        except yaml.YAMLError as err:
            return Response.json({"errors": [{"message": f"Invalid YAML in the card metadata: {err}"}]}, status=400)
        if data is not None and not isinstance(data, dict):
            return Response.json({"errors": [{"message": "The card metadata must be a YAML mapping"}]}, status=400)
        return Response.json({"errors": [], "warnings": []})

    def _repo_url(self, repo_type: str, repo_id: str) -> str:
        prefix = "" if repo_type == "model" else f"{repo_type}s/"
        return f"{self.endpoint}/{prefix}{repo_id}"

    # -- reading a revision --------------------------------------------------------------------

    def _card_data(self, commit: Commit) -> dict:
        content = self._read_or_none(commit.files.get("README.md"))
        if content is None:
            return {}
        match = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", content.decode("utf-8", "replace"), re.DOTALL)
        try:
            data = yaml.safe_load(match.group(1)) if match else None
        except yaml.YAMLError:
            return {}
        return data if isinstance(data, dict) else {}

    def _info(self, request: Request, repo_type: str, repo_id: str, revision: str) -> Response:
        repo = self._repo(request, repo_type, repo_id)
        commit = repo.commits[self._resolve(repo, revision)]
        card = self._card_data(commit)
        blobs = request.flag("blobs")
        siblings = []
        for path, entry in sorted(commit.files.items()):
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs:
                sibling.update(size=entry.size, blobId=entry.oid)
                if entry.is_lfs:
                    sibling["lfs"] = {"sha256": entry.lfs_sha256, "size": entry.size, "pointerSize": entry.pointer_size}
            siblings.append(sibling)
        info: dict[str, Any] = {
            "_id": hashlib.sha1(f"{repo_type}/{repo_id}".encode()).hexdigest()[:24], "id": repo_id,
            "author": repo.namespace, "sha": commit.id, "lastModified": commit.date, "createdAt": repo.created_at,
            "private": repo.private, "gated": False, "disabled": False, "downloads": 0, "likes": 0,
            "tags": card["tags"] if isinstance(card.get("tags"), list) else [], "cardData": card, "siblings": siblings,
            "usedStorage": sum(e.size for e in commit.files.values()),
        }
        if repo_type == "model":
            info["modelId"] = repo_id
            info["pipeline_tag"] = card.get("pipeline_tag")
            info["library_name"] = card.get("library_name")
            if "config.json" in commit.files:
                try:
                    config = json.loads(self._read_or_none(commit.files["config.json"]) or b"{}")
                except ValueError:
                    config = {}
                config = config if isinstance(config, dict) else {}
                keys = ("architectures", "model_type", "auto_map")
                info["config"] = {k: config[k] for k in keys if k in config}
                architectures = config.get("architectures")
                architecture = architectures[0] if isinstance(architectures, list) and architectures else ""
                architecture = architecture if isinstance(architecture, str) else ""
                if info["pipeline_tag"] is None:
                    info["pipeline_tag"] = next(
                        # Like the Hub: from the card, else from the config's architecture.
                        (tag for suffix, (_, tag) in HEADS.items() if architecture.endswith(suffix)), None
                    )
                info["library_name"] = info["library_name"] or "transformers"
            counts: dict[str, int] = {}
            for path, entry in commit.files.items():
                if path.endswith(".safetensors") and entry.is_lfs:
                    try:
                        found = _parameter_count(self._content_path(entry)) or {}
                    except HubError:  # a stored entry with an invalid object id: nothing to count
                        found = {}
                    for dtype, n in found.items():
                        counts[dtype] = counts.get(dtype, 0) + n
            if counts:
                info["safetensors"] = {"parameters": counts, "total": sum(counts.values())}
        return Response.json(info)

    def _entries_json(self, repo: Repo, commit: Commit, paths: list[str], expand: bool) -> list[dict]:
        """`/tree` or `/paths-info` items for those of `paths` that exist in `commit`.

        Linear in the file count however many paths are asked: one pass over the files finds every folder's
        contents, and one walk of the history (`_last_commits`) every item's last commit.
        """
        below: dict[str, list[str]] = {}  # folder -> every file under it
        for path in commit.files:
            parts = path.split("/")
            for i in range(1, len(parts)):
                below.setdefault("/".join(parts[:i]), []).append(path)
        items = []
        for path in paths:
            entry = commit.files.get(path)
            if entry is not None:
                item: dict[str, Any] = {"type": "file", "oid": entry.oid, "size": entry.size, "path": path}
                if entry.is_lfs:
                    item["lfs"] = {"oid": entry.lfs_sha256, "size": entry.size, "pointerSize": entry.pointer_size}
            elif path in below:
                children = sorted((p, commit.files[p].oid) for p in below[path])
                tree_oid = hashlib.sha1(json.dumps(children).encode()).hexdigest()
                item = {"type": "directory", "oid": tree_oid, "size": 0, "path": path}
            else:
                continue
            items.append(item)
        if expand:
            last = self._last_commits(repo, commit, {item["path"] for item in items})
            for item in items:
                found = last[item["path"]]
                item["lastCommit"] = {"id": found.id, "title": found.title, "date": found.date}
        return items

    def _last_commits(self, repo: Repo, commit: Commit, paths: set[str]) -> dict[str, Commit]:
        """For each path (file or folder), the oldest commit of `commit`'s first-parent history back to which it
        is unchanged (the Hub's `lastCommit`): one diff per commit walked, until every path has its answer."""
        found: dict[str, Commit] = {}
        history = self._first_parent_history(repo, commit.id)
        current = next(history)
        for older in history:
            if len(found) == len(paths):
                break
            new, old = current.files, older.files
            changed = {p for p, e in new.items() if p not in old or old[p].oid != e.oid} | (old.keys() - new.keys())
            for path in changed:
                parts = path.split("/")
                for i in range(1, len(parts) + 1):
                    name = "/".join(parts[:i])
                    if name in paths and name not in found:
                        found[name] = current
            current = older
        return {path: found.get(path, current) for path in paths}

    def _tree(self, request: Request, repo_type: str, repo_id: str, revision: str, path: str) -> Response:
        repo = self._repo(request, repo_type, repo_id)
        commit = repo.commits[self._resolve(repo, revision)]
        path = path.strip("/")
        prefix = f"{path}/" if path else ""
        if path and path in commit.files:
            raise HubError(400, f"{path} is a file, not a folder")
        below = [p for p in commit.files if p.startswith(prefix)]
        if path and not below:
            raise _entry_not_found(path, revision, commit.id)
        if request.flag("recursive"):
            folders = {prefix + "/".join(p[len(prefix):].split("/")[:i]) for p in below
                       for i in range(1, p[len(prefix):].count("/") + 1)}
            paths = sorted(folders) + sorted(below)
        else:
            paths = sorted({prefix + p[len(prefix):].split("/")[0] for p in below})
        return Response.json(self._entries_json(repo, commit, paths, request.flag("expand")))

    def _paths_info(self, request: Request, repo_type: str, repo_id: str, revision: str) -> Response:
        repo = self._repo(request, repo_type, repo_id)
        commit = repo.commits[self._resolve(repo, revision)]
        if "json" in request.headers.get("Content-Type", ""):
            payload = request.json()
            paths = _list_of(_field(payload, "paths", list), str, "paths")
            expand = _field(payload, "expand", bool, False)
        else:  # huggingface_hub posts a form: paths=a&paths=b&expand=False
            try:
                form = parse_qs(request.body.decode(), strict_parsing=bool(request.body), errors="strict")
            except (UnicodeDecodeError, ValueError):
                raise HubError(400, "paths-info takes a form (paths=...&expand=...) or a JSON object") from None
            if "paths" not in form:
                raise HubError(400, "Request body: missing field 'paths'")
            paths, expand = form["paths"], form.get("expand", ["false"])[-1].lower() in ("1", "true")
        return Response.json(self._entries_json(repo, commit, [p.strip("/") for p in paths], expand))

    def _refs(self, request: Request, repo_type: str, repo_id: str) -> Response:
        repo = self._repo(request, repo_type, repo_id)

        def refs(kind: str, table: dict[str, str]) -> list[dict]:
            return [{"name": n, "ref": f"refs/{kind}/{n}", "targetCommit": c} for n, c in sorted(table.items())]

        data = {"branches": refs("heads", repo.branches), "converts": [], "tags": refs("tags", repo.tags)}
        if request.flag("include_prs"):
            data["pullRequests"] = [{"name": r, "ref": r, "targetCommit": c} for r, c in repo.pull_requests.items()]
        return Response.json(data)

    def _commits(self, request: Request, repo_type: str, repo_id: str, revision: str) -> Response:
        repo = self._repo(request, repo_type, repo_id)
        history = self._first_parent_history(repo, self._resolve(repo, revision))
        return Response.json([
            {"id": c.id, "title": c.title, "message": c.message, "date": c.date, "authors": [{"user": c.author}]}
            for c in history
        ])

    def _resolve_file(self, request: Request, repo_type: str, repo_id: str, revision: str, path: str) -> Response:
        repo = self._repo(request, repo_type, repo_id)
        commit_id = self._resolve(repo, revision)
        entry = repo.commits[commit_id].files.get(path)
        if entry is None:
            raise _entry_not_found(path, revision, commit_id)
        headers = {
            "X-Repo-Commit": commit_id, "ETag": f'"{entry.oid}"', "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        if entry.is_lfs:  # The Hub's ETag for an LFS file is its sha256, sent as the linked etag.
            headers.update({"X-Linked-Etag": f'"{entry.lfs_sha256}"', "X-Linked-Size": str(entry.size)})
        start, end = 0, entry.size - 1
        status = 200
        range_header = request.headers.get("Range")
        if range_header:
            match = re.fullmatch(r"bytes=(\d*)-(\d*)", range_header.strip())
            if match is None or match.groups() == ("", ""):
                raise HubError(416, f"Invalid Range header: {range_header}",
                               headers={"Content-Range": f"bytes */{entry.size}"})
            first, last = match.groups()
            if first:
                start, end = int(first), min(int(last), entry.size - 1) if last else entry.size - 1
            else:
                start = max(entry.size - int(last), 0)
            if start >= entry.size or start > end:
                raise HubError(416, f"Range {range_header} is outside the file ({entry.size} bytes)",
                               headers={"Content-Range": f"bytes */{entry.size}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{entry.size}"
        return Response(status, headers, file=self._content_path(entry), start=start, length=end - start + 1)

    # -- writing -------------------------------------------------------------------------------

    def _create_branch(self, request: Request, repo_type: str, repo_id: str, branch: str) -> Response:
        repo = self._repo(request, repo_type, repo_id, write=True)
        if branch in repo.branches:
            raise HubError(409, f"Reference already exists: branch {branch!r} in {repo_id}")
        if not _valid_ref(branch) or branch.startswith("refs/"):
            raise HubError(400, f"Invalid branch name {branch!r}")
        start = _field(request.json(), "startingPoint", str, DEFAULT_BRANCH)
        if not start:
            raise HubError(400, "Invalid startingPoint '': name a branch, tag or commit")
        repo.branches = {**repo.branches, branch: self._resolve(repo, start)}  # a new dict: see `Repo`
        self._save(repo)
        return Response.json({})

    def _create_tag(self, request: Request, repo_type: str, repo_id: str, revision: str) -> Response:
        repo = self._repo(request, repo_type, repo_id, write=True)
        tag = _field(request.json(), "tag", str)
        if not _valid_ref(tag):
            raise HubError(400, f"Invalid tag name {tag!r}")
        if tag in repo.tags:
            raise HubError(409, f"Reference already exists: tag {tag!r} in {repo_id}")
        repo.tags = {**repo.tags, tag: self._resolve(repo, revision)}
        self._save(repo)
        return Response.json({})

    def _delete_ref(self, request: Request, repo_type: str, repo_id: str, kind: str, name: str) -> Response:
        repo = self._repo(request, repo_type, repo_id, write=True)
        table = repo.branches if kind == "branch" else repo.tags
        if name not in table:
            raise _revision_not_found(repo, name)
        if kind == "branch" and name == DEFAULT_BRANCH:
            raise HubError(403, f"Cannot delete the default branch {DEFAULT_BRANCH!r}")
        remaining = {ref: target for ref, target in table.items() if ref != name}  # a new dict: see `Repo`
        setattr(repo, "branches" if kind == "branch" else "tags", remaining)
        self._save(repo)
        return Response.json({})

    def _branch_head(self, repo: Repo, revision: str) -> tuple[str, str]:
        """(branch name, head commit) for a revision a commit may go on: a branch or a PR ref."""
        name = revision[len("refs/heads/"):] if revision.startswith("refs/heads/") else revision
        if name in repo.branches:
            return name, repo.branches[name]
        if name in repo.pull_requests:
            return name, repo.pull_requests[name]
        if name in repo.tags or name in repo.commits:
            raise HubError(400, f"Cannot commit to {revision!r}: it is a tag or a commit, not a branch")
        raise _revision_not_found(repo, revision)

    def _preupload(self, request: Request, repo_type: str, repo_id: str, revision: str) -> Response:
        repo = self._repo(request, repo_type, repo_id, write=True)
        _, head = self._branch_head(repo, DEFAULT_BRANCH if request.flag("create_pr") else revision)
        files = repo.commits[head].files
        payload = request.json()
        gitattributes = self._read(files[".gitattributes"]).decode() if ".gitattributes" in files else ""
        lfs_patterns = _lfs_patterns(gitattributes)
        ignore = [line.strip() for line in _field(payload, "gitIgnore", str, "").splitlines()
                  if line.strip() and not line.startswith("#")]
        answers = []
        for item in _list_of(_field(payload, "files", list), dict, "files"):
            path = _validate_path(_field(item, "path", str, where="files[]"))
            try:
                sample = base64.b64decode(_field(item, "sample", str, "", where=path), validate=True)
            except binascii.Error:
                raise HubError(400, f"File {path}: sample must be base64") from None
            size = _field(item, "size", int, 0, where=path)
            is_lfs = _matches(path, lfs_patterns) or size >= LFS_SIZE_THRESHOLD or b"\0" in sample
            existing = files.get(path)
            oid = None
            if existing is not None:  # what the client compares with its own hash to skip unchanged files
                oid = existing.lfs_sha256 if is_lfs else (None if existing.is_lfs else existing.oid)
            answers.append({"path": path, "uploadMode": "lfs" if is_lfs else "regular",
                            "shouldIgnore": _matches(path, ignore), "oid": oid})
        return Response.json({"files": answers, "commitOid": head})

    def _commit(self, request: Request, repo_type: str, repo_id: str, revision: str) -> Response:
        repo = self._repo(request, repo_type, repo_id, write=True)
        user = self._require_user(request)
        try:
            text = request.body.decode()
        except UnicodeDecodeError:
            raise HubError(400, "Commit payload is not UTF-8") from None
        lines = [_parse_json(line, "A commit payload line") for line in text.splitlines() if line.strip()]
        if not all(isinstance(line, dict) for line in lines):
            raise HubError(400, "Commit payload: every line must be a JSON object")
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "Commit payload must start with a header line")
        header = _field(lines[0], "value", dict, where="Commit header")
        title = _field(header, "summary", str, "", where="Commit header")
        message = _field(header, "description", str, "", where="Commit header")
        parent_commit = _field(header, "parentCommit", str, None, where="Commit header")
        create_pr = request.flag("create_pr")
        branch, head = self._branch_head(repo, DEFAULT_BRANCH if create_pr else revision)
        if parent_commit and parent_commit != head:
            raise HubError(412, f"A commit has happened since {parent_commit}: the head of {branch} is {head}")
        files = dict(repo.commits[head].files)
        added: set[str] = set()
        for line in lines[1:]:
            key, value = line.get("key"), _field(line, "value", dict, where="Commit operation")
            path = _validate_path(value.get("path", ""))
            if key == "file":
                try:
                    content = base64.b64decode(_field(value, "content", str, where=path), validate=True)
                except binascii.Error:
                    raise HubError(400, f"File {path}: content must be base64") from None
                files[path] = FileEntry(size=len(content), oid=self._store_blob(content))
                added.add(path)
            elif key == "lfsFile":
                files[path] = self._lfs_entry(repo, path, value)
                added.add(path)
            elif key == "deletedFile":
                if files.pop(path, None) is None:
                    raise _entry_not_found(path, revision, head)
            elif key == "deletedFolder":
                inside = [p for p in files if p.startswith(path.rstrip("/") + "/")]
                if not inside:
                    raise _entry_not_found(path, revision, head)
                for p in inside:
                    del files[p]
            else:
                raise HubError(400, f"Unknown commit operation {str(key)[:40]!r}")
        conflict = _tree_conflicts(files, added)
        if conflict:
            raise HubError(400, f"Invalid commit: {conflict}")
        now = _now()
        commit_id = hashlib.sha1(f"{head}/{now}/{uuid.uuid4()}".encode()).hexdigest()
        # The commit goes in before a ref names it, and refs change as new dicts: see `Repo`.
        repo.commits[commit_id] = Commit(commit_id, [head], title, message, now, user, files)
        data: dict[str, Any] = {"success": True, "commitOid": commit_id, "hookOutput": "",
                                "commitUrl": f"{self._repo_url(repo_type, repo_id)}/commit/{commit_id}"}
        if create_pr:
            number = len(repo.pull_requests) + 1
            repo.pull_requests = {**repo.pull_requests, f"refs/pr/{number}": commit_id}
            data["pullRequestUrl"] = f"{self._repo_url(repo_type, repo_id)}/discussions/{number}"
        else:
            repo.branches = {**repo.branches, branch: commit_id}
        self._save(repo)
        return Response.json(data)

    # -- Git LFS -------------------------------------------------------------------------------

    def _lfs_entry(self, repo: Repo, path: str, value: dict) -> FileEntry:
        """The entry of an `lfsFile` commit operation, for an object uploaded to this repository only.

        An object another repository holds is refused with the same words as one that exists nowhere: naming a
        sha256 neither reaches someone else's (maybe private) file nor tells whether it exists.
        """
        sha = _sha256(_field(value, "oid", str, where=path))
        algo = _field(value, "algo", str, "sha256", where=path)
        declared = _field(value, "size", int, None, where=path)
        obj = self._object_path("lfs", sha)
        if algo != "sha256" or sha not in repo.lfs_objects or not obj.is_file():
            raise HubError(422, f"LFS object {sha} for {path} was never uploaded to {repo.repo_id}: upload it "
                                "before committing")
        size = obj.stat().st_size
        if declared not in (None, size):
            raise HubError(422, f"LFS object {sha} for {path} has {size} bytes, not {declared}")
        pointer = lfs_pointer(sha, size)
        return FileEntry(size=size, oid=git_blob_oid(pointer), lfs_sha256=sha, pointer_size=len(pointer))

    def _lfs_object_problem(self, obj: dict) -> str | None:
        sha, size = obj.get("oid"), obj.get("size")
        if not isinstance(sha, str) or not _OBJECT_IDS["lfs"].fullmatch(sha):
            return f"oid {str(sha)[:80]!r} is not a sha256 (64 lowercase hex digits)"
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= self.max_lfs_size:
            return f"size {str(size)[:40]} is not a whole number of bytes from 0 to this hub's limit of " \
                   f"{self.max_lfs_size}"
        return None

    def _lfs_batch(self, request: Request, repo_type: str, repo_id: str) -> Response:
        repo = self._repo(request, repo_type, repo_id, write=True)
        payload = request.json()
        if payload.get("operation") != "upload":
            raise HubError(400, "The local hub's LFS batch API only supports the 'upload' operation")
        now = time.monotonic()
        self._upload_tickets = {k: t for k, t in self._upload_tickets.items() if t.expires > now}  # drop expired
        objects = []
        for obj in _list_of(_field(payload, "objects", list), dict, "objects"):
            problem = self._lfs_object_problem(obj)
            if problem:
                objects.append({"oid": str(obj.get("oid", ""))[:80], "size": 0,
                                "error": {"code": 422, "message": problem}})
                continue
            sha, size = obj["oid"], obj["size"]
            answer: dict[str, Any] = {"oid": sha, "size": size, "authenticated": True}
            # Only this repository's objects count as uploaded (no "actions"): whether another repository holds
            # the object is not told, and its bytes must come again, checked, to be linked here.
            if not self._holds(repo, sha, size):
                ticket = secrets.token_urlsafe(16)
                self._upload_tickets[ticket] = UploadTicket(sha, size, (repo_type, repo_id), now + self.upload_ttl)
                prefix = "" if repo_type == "model" else f"{repo_type}s/"
                answer["actions"] = {
                    "upload": {"href": f"{self.endpoint}/lfs-upload/{ticket}", "expires_in": int(self.upload_ttl)},
                    "verify": {"href": f"{self.endpoint}/{prefix}{repo_id}.git/info/lfs/objects/verify"},
                }
            objects.append(answer)
        return Response.json({"transfer": "basic", "objects": objects},
                             headers={"Content-Type": "application/vnd.git-lfs+json"})

    def _holds(self, repo: Repo, sha: str, size: int) -> bool:
        stored = self._object_path("lfs", sha)
        return sha in repo.lfs_objects and stored.is_file() and stored.stat().st_size == size

    def _live_ticket(self, ticket: str) -> UploadTicket:
        found = self._upload_tickets.get(ticket)
        if found is None:
            raise HubError(403, "Unknown or already used LFS upload URL")
        if found.expires <= time.monotonic():
            raise HubError(403, f"This LFS upload URL expired (they last {self.upload_ttl:g} s): ask the batch API "
                                "for a new one")
        return found

    def _lfs_put(self, request: Request, ticket_id: str) -> Response:
        # The ticket in the URL is the authorisation, as with the Hub's pre-signed storage URLs: only a writer of
        # the repository gets one, for one object of a stated size, once, and briefly.
        ticket = self._live_ticket(ticket_id)
        assert request.upload is not None  # the handler streams every upload to a file
        received, actual, length = request.upload
        if actual != ticket.sha256 or length != ticket.size:
            raise HubError(400, f"Uploaded content has sha256 {actual} and {length} bytes; "
                                f"expected {ticket.sha256} and {ticket.size} bytes")
        repo = self.repos.get(ticket.repo)
        if repo is None:
            raise _repo_not_found(ticket.repo[1])
        # The bytes are checked, so the same content already stored for another repository is the same file.
        os.replace(received, self._object_path("lfs", ticket.sha256))
        del self._upload_tickets[ticket_id]
        repo.lfs_objects = repo.lfs_objects | {ticket.sha256}
        self._save(repo)
        return Response.json({})

    def _lfs_verify(self, request: Request, repo_type: str, repo_id: str) -> Response:
        repo = self._repo(request, repo_type, repo_id, write=True)
        payload = request.json()
        # Only a sha256 names a stored object: any other string would be a path, and the answer an oracle.
        sha, size = _sha256(_field(payload, "oid", str)), _field(payload, "size", int)
        if not self._holds(repo, sha, size):
            raise HubError(404, f"LFS object {sha} of {size} bytes was not uploaded to {repo_id}")
        return Response.json({})


# ---------------------------------------------------------------------------------------------
# HTTP plumbing and the public server object.
# ---------------------------------------------------------------------------------------------


class _DeadlineReader(io.RawIOBase):
    """The connection's input, read under the current request's deadline.

    A socket timeout bounds one read, so a client sending a byte now and then would hold its connection for
    ever; each read here may only wait what is left of the request's time.
    """

    def __init__(self, handler: _Handler):
        self.handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self.handler.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("The request did not arrive before its deadline")
        self.handler.connection.settimeout(remaining)
        count = self.handler.connection.recv_into(buffer)
        self.handler.received += count
        return count


class _DeadlineWriter(io.BufferedIOBase):
    """The connection's output, written under the request's deadline (plus ANSWER_GRACE, so a 408 can leave): a
    client that stops reading a download frees its connection like one that stops sending."""

    def __init__(self, handler: _Handler):
        self.handler = handler

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        remaining = self.handler.deadline + ANSWER_GRACE - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("The answer did not leave before the request's deadline")
        self.handler.connection.settimeout(remaining)
        self.handler.connection.sendall(data)
        with memoryview(data) as view:
            return view.nbytes


class _Handler(BaseHTTPRequestHandler):
    """Turns HTTP/1.1 requests into `Request`s for `server.app` and writes back its `Response`.

    Each request has until `deadline` (the server's `request_timeout` after its first byte) to arrive and be
    answered; an idle connection waits as long for that byte. While it waits for the client (`waiting`), `received` counts its bytes, so
    that a full server can tell the slowest sender (see `_Server.process_request`).
    """

    protocol_version = "HTTP/1.1"  # keep-alive, as the client expects; every answer carries Content-Length
    # The version assumed until the request line is parsed: the stdlib's "HTTP/0.9" would answer a malformed
    # request line with a bare body, no status line or headers.
    default_request_version = "HTTP/1.0"
    # Headers and body leave in separate writes: with Nagle's algorithm and the client's delayed ACK, each
    # answer would wait ~40 ms.
    disable_nagle_algorithm = True
    server: _Server

    def _declared_length(self) -> int | None:
        """The body's declared size from its framing headers (None: chunked), before any of it is read."""
        codings = [c.strip().lower() for v in self.headers.get_all("Transfer-Encoding") or [] for c in v.split(",")]
        lengths = self.headers.get_all("Content-Length") or []
        if codings:
            if codings != ["chunked"]:
                raise HubError(501, f"Unsupported Transfer-Encoding {', '.join(codings)!r}: only 'chunked'")
            if lengths:  # two framings for one body: the classic request-smuggling shape
                raise HubError(400, "A request may not have both Content-Length and Transfer-Encoding")
            return None
        if not lengths:
            return 0
        if len(lengths) > 1 or not re.fullmatch(r"[0-9]+", lengths[0].strip()):
            raise HubError(400, f"Invalid Content-Length {', '.join(lengths)[:40]!r}: expected one decimal number")
        return int(lengths[0])

    def _body_parts(self, length: int | None, limit: int) -> Iterator[bytes]:
        """The body in parts of at most 1 MiB, at most `limit` bytes; one that ends early or is framed wrong is a 400."""
        if length is not None:
            remaining = length
            while remaining:
                part = self.rfile.read(min(remaining, 1 << 20))
                if not part:
                    raise HubError(400, f"The request body ended after {length - remaining} of {length} bytes")
                remaining -= len(part)
                yield part
            return
        total = 0
        while True:
            line = self.rfile.readline(1026)
            size = line.split(b";")[0].strip()
            if not line.endswith(b"\n") or not re.fullmatch(rb"[0-9a-fA-F]+", size):
                raise HubError(400, f"Invalid chunk size line {line[:40]!r} in a chunked body")
            size = int(size, 16)
            if size == 0:
                for _ in range(100):  # trailers, ignored
                    if self.rfile.readline(8192) in (b"\r\n", b"\n", b""):
                        return
                raise HubError(400, "Too many trailer lines after a chunked body")
            total += size
            if total > limit:
                raise HubError(413, f"Request body is over this hub's limit of {limit} bytes")
            yield from self._body_parts(size, size)
            if self.rfile.readline(3) not in (b"\r\n", b"\n"):
                raise HubError(400, "A chunk of the body is longer than its size line says")

    def _receive_upload(self, length: int | None, limit: int) -> tuple[Path, str, int]:
        """Stream an LFS upload into a hidden file beside the LFS store, hashing it on the way."""
        store = self.server.app.root / "lfs"
        fd, tmp = temp_file_beside(store / "upload")  # hidden, with open()'s permissions
        digest, size = hashlib.sha256(), 0
        try:
            with os.fdopen(fd, "wb") as f:
                for part in self._body_parts(length, limit):
                    digest.update(part)
                    f.write(part)
                    size += len(part)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return Path(tmp), digest.hexdigest(), size

    def _serve(self) -> None:
        split = urlsplit(self.path)
        request = Request(
            method=self.command,
            segments=[unquote(s) for s in split.path.split("/")[1:] if s != ""],
            query=parse_qs(split.query),
            headers=self.headers,
            body=b"",
        )
        app = self.server.app
        try:
            # Everything the headers can tell is settled before a byte of the body is read.
            length = self._declared_length()
            limit = app.admit(request, length)
            if self.headers.get("Expect", "").lower() == "100-continue":
                self.send_response_only(100)
                self.end_headers()
            if request.segments[:1] == ["lfs-upload"]:  # admitted: a PUT to a live upload URL
                request.upload = self._receive_upload(length, limit)
            else:
                request.body = b"".join(self._body_parts(length, limit))
        except HubError as err:
            # The rest of the body (if any) stays unread, so the connection cannot carry another request.
            self.close_connection = True
            self._send(self._error_response(err, {"Connection": "close"}))
            return
        except TimeoutError:
            self.close_connection = True
            message = f"The request body did not arrive within {self.server.request_timeout:g} s"
            self._send(self._error_response(HubError(408, message), {"Connection": "close"}))
            return
        self.waiting = False  # the request is in: its connection is no longer a candidate for eviction
        try:
            response = app.handle(request)
        except HubError as err:
            response = self._error_response(err)
        except Exception as err:  # a bug here must reach the client as a 500, not a dropped connection
            logger.exception("local hub: %s %s failed", self.command, split.path)
            response = Response.json({"error": f"Local hub internal error: {type(err).__name__}: {err}"}, status=500)
        finally:
            if request.upload is not None:
                request.upload[0].unlink(missing_ok=True)  # moved into the store if it was accepted
        self._send(response)

    @staticmethod
    def _error_response(err: HubError, extra: Mapping[str, str] | None = None) -> Response:
        headers = {"X-Error-Message": err.message, **err.headers, **(extra or {})}
        if err.code:
            headers["X-Error-Code"] = err.code
        return Response.json({"error": err.message, **err.body}, status=err.status, headers=headers)

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        length = response.length if response.file is not None else len(response.body)
        for name, value in {**response.headers, "Content-Length": str(length)}.items():
            # Header values echo request data (paths, revisions, names): a CR or LF would start a header of
            # the client's choosing, so only printable ASCII is sent.
            self.send_header(name, _UNSAFE_IN_HEADER.sub("?", value))
        self.end_headers()
        if self.command == "HEAD":
            return
        if response.file is None:
            self.wfile.write(response.body)
            return
        with open(response.file, "rb") as f:
            f.seek(response.start)
            remaining = response.length
            while remaining > 0:
                chunk = f.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                self.wfile.write(chunk)
                remaining -= len(chunk)

    def handle_expect_100(self) -> bool:
        return True  # "100 Continue" only once the headers have passed `admit` (see `_serve`)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _serve

    def setup(self) -> None:
        super().setup()
        self._start_request()
        self.rfile.close()  # the stdlib's reader, replaced (left open, it would keep the socket from closing)
        self.rfile = io.BufferedReader(_DeadlineReader(self))
        self.wfile = _DeadlineWriter(self)
        with self.server.connections_lock:
            self.server.connections[self.connection] = self

    def _start_request(self) -> None:
        self.started = time.monotonic()
        self.deadline = self.started + self.server.request_timeout
        self.received, self.waiting = 0, True

    def handle_one_request(self) -> None:
        # An idle connection may wait `request_timeout` for a request; the request then has as long again from
        # its first byte (so time a keep-alive connection spent idle is not taken from it).
        self._start_request()
        try:
            if not self.rfile.peek(1):
                self.close_connection = True  # the client closed the connection
                return
        except TimeoutError:
            self.close_connection = True
            return
        self.deadline = time.monotonic() + self.server.request_timeout
        super().handle_one_request()

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.pop(self.connection, None)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        # Request lines only (never headers, so never a token), at debug level rather than on stderr.
        logger.debug("local hub: " + format, *args)


class _Server(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` of them. Beyond that a new client takes the slot of the
    slowest connection still waiting for its request (idle or dripping bytes), or gets a quick 503 if every slot
    is doing work: so slow clients cannot keep everyone else out."""

    daemon_threads = True  # a stuck client never keeps the interpreter alive
    app: HubApp

    def __init__(self, *args: Any, max_connections: int, request_timeout: float, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.request_timeout = request_timeout
        self.slots = threading.BoundedSemaphore(max_connections)
        # Open connections and their handlers: `shutdown()` only stops accepting new ones, and a client's pool
        # would go on being served by their threads after `stop()`; a full server evicts the slowest of them.
        self.connections: dict[socket.socket, _Handler] = {}
        self.connections_lock = threading.Lock()

    def _evict_slowest(self) -> bool:
        """Close the connection sending slowest among those waiting at least EVICTABLE_AFTER seconds for their
        request, and take its slot once its thread lets go; False if there is none."""
        now = time.monotonic()
        with self.connections_lock:
            waiting = [h for h in self.connections.values() if h.waiting and now - h.started >= EVICTABLE_AFTER]
        if not waiting:
            return False
        victim = min(waiting, key=lambda h: h.received / (now - h.started))
        victim.waiting = False  # not picked twice
        try:
            victim.connection.shutdown(socket.SHUT_RDWR)  # its read returns at once, and its thread ends
        except OSError:
            pass
        return self.slots.acquire(timeout=1.0)

    def process_request(self, request: socket.socket, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False) and not self._evict_slowest():
            body = json.dumps({"error": "The local hub is serving as many connections as it allows; retry"}).encode()
            try:
                request.settimeout(1.0)
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                )
            except OSError:
                pass
            self._linger_and_close(request, wait=0.0)  # not in the accepting thread: no waiting here
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: socket.socket, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def shutdown_request(self, request: socket.socket) -> None:
        self._linger_and_close(request, wait=LINGER_SECONDS)

    @staticmethod
    def _linger_and_close(request: socket.socket, wait: float) -> None:
        """Close after reading (and dropping) what the client still sends, briefly and up to a bound.

        Closing a socket with unread input makes the kernel reset the connection, and the client may lose the
        answer (a 413 for a body it is still sending, a 400 for a bad line): so the server stops sending,
        then drains for at most `wait` seconds and LINGER_BYTES, as web servers do ("lingering close").
        """
        try:
            request.shutdown(socket.SHUT_WR)
            deadline, drained = time.monotonic() + wait, 0
            while drained < LINGER_BYTES:
                request.settimeout(max(deadline - time.monotonic(), 0.0))
                data = request.recv(65536)
                if not data:
                    break
                drained += len(data)
        except OSError:  # nothing more to read now, a timeout, or the client is gone
            pass
        request.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away mid-answer is routine, not a server bug worth a traceback.
        if isinstance(sys.exc_info()[1], OSError):
            logger.debug("local hub: connection from %s ended: %s", client_address[0], sys.exc_info()[1])
        else:
            logger.exception("local hub: error while serving %s", client_address[0])

    def close_connections(self) -> None:
        with self.connections_lock:
            for connection in list(self.connections):
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed by the client


class LocalHub:
    """A Hub-compatible HTTP server on 127.0.0.1, storing its repositories under `root_dir`.

    Args:
        root_dir: folder holding the repositories (created if missing; reused if it has some).
        token: the write token (`Authorization: Bearer <token>`); a random one if None.
        user: the account the token belongs to; repos are created under this namespace by default.
        orgs: organisations `user` may also create repositories in.
        port: 0 picks a free port; `endpoint` tells which.
        other_accounts: more accounts, token -> user name (for trying what one user can do to another's repos).
        max_body_size: largest request body accepted (413 beyond), except LFS uploads (their declared size).
        max_lfs_size: largest LFS object an upload URL is given for.
        upload_ttl: seconds an LFS upload URL stays valid.
        max_connections: connections served at once; beyond that a new client takes the slot of the slowest one
            still waiting for its request, or gets 503 (Retry-After: 1) if every slot is at work.
        request_timeout: seconds each request may take, from its first byte to the last byte of its answer; an
            idle keep-alive connection is closed after as long.

    Use as a context manager (or `start()` / `stop()`); the server runs in a daemon thread.
    """

    def __init__(
        self,
        root_dir: str | os.PathLike,
        *,
        token: str | None = None,
        user: str = "local-user",
        orgs: tuple[str, ...] = (),
        port: int = 0,
        other_accounts: Mapping[str, str] | None = None,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        max_lfs_size: int = DEFAULT_MAX_LFS_SIZE,
        upload_ttl: float = DEFAULT_UPLOAD_TTL,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ):
        self.root_dir = Path(root_dir)
        self.token = token if token is not None else "hf_local_" + secrets.token_hex(16)
        self.user = user
        limits = {"max_body_size": max_body_size, "max_lfs_size": max_lfs_size, "upload_ttl": upload_ttl}
        for name, value in {**limits, "max_connections": max_connections, "request_timeout": request_timeout}.items():
            if not value > 0:
                raise ValueError(f"{name}={value!r} must be positive")
        accounts = {**(other_accounts or {}), self.token: user}
        for name in accounts.values():
            if not _REPO_NAME.match(name):
                raise ValueError(f"Invalid user name {name!r}: letters, digits, '-', '_', '.'")
        self.app = HubApp(self.root_dir, accounts, {user: list(orgs)}, **limits)
        self._limits = {"max_connections": max_connections, "request_timeout": request_timeout}
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._saved_settings: list[tuple[Any, str, Any]] | None = None  # what configure_clients() replaced

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("LocalHub is not running: call start() or use it in a `with` block")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def environment(self) -> dict[str, str]:
        """The variables that point huggingface_hub at this server (read when it is imported)."""
        return {"HF_ENDPOINT": self.endpoint, "HF_TOKEN": self.token, "HF_HUB_DISABLE_XET": "1"}

    def configure_clients(self) -> None:
        """Point this process's huggingface_hub and transformers at this server, even if already imported.

        Setting `environment()` before the first import is the documented way; a notebook that imported
        transformers first can call this instead. It sets the environment (for subprocesses too) and the
        settings huggingface_hub copied from it at import; `stop()` puts everything back.
        """
        if self._saved_settings is not None:
            return
        saved: list[tuple[Any, str, Any]] = []

        def replace(owner: Any, name: str, value: Any) -> None:
            saved.append((owner, name, getattr(owner, name)))
            setattr(owner, name, value)

        for name, value in self.environment().items():
            saved.append((os.environ, name, os.environ.get(name)))
            os.environ[name] = value
        constants = sys.modules.get("huggingface_hub.constants")
        if constants is not None:
            replace(constants, "ENDPOINT", self.endpoint)
            replace(constants, "HUGGINGFACE_CO_URL_TEMPLATE", self.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
            replace(constants, "HF_HUB_DISABLE_XET", True)  # this server speaks plain LFS
        hf_api = sys.modules.get("huggingface_hub.hf_api")
        if hf_api is not None:  # the default client behind huggingface_hub's module-level functions
            replace(hf_api.api, "endpoint", self.endpoint)
        transformers_hub = sys.modules.get("transformers.utils.hub")
        if transformers_hub is not None:  # transformers' shared client, made on first use
            replace(transformers_hub, "_hf_api", None)
        self._saved_settings = saved

    def _restore_clients(self) -> None:
        for owner, name, value in reversed(self._saved_settings or []):
            if owner is os.environ:
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            else:
                setattr(owner, name, value)
        self._saved_settings = None

    def start(self) -> LocalHub:
        if self._server is not None:
            return self
        self._server = _Server(("127.0.0.1", self._port), _Handler, **self._limits)
        self._server.app = self.app
        self.app.endpoint = self.endpoint
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="local-hub", daemon=True)
        self._thread.start()
        logger.info("local hub serving %s at %s", self.root_dir, self.endpoint)
        return self

    def stop(self) -> None:
        self._restore_clients()
        if self._server is None:
            return
        self._server.shutdown()
        self._server.close_connections()
        self._server.server_close()
        assert self._thread is not None
        self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> LocalHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def repo_files(self, repo_id: str, revision: str = DEFAULT_BRANCH, repo_type: str = "model") -> dict[str, bytes]:
        """Contents of every file of a repo at a revision: for tests and demos that inspect what was pushed."""
        with self.app._lock:
            repo = self.app.repos.get((repo_type, repo_id))
            if repo is None:
                raise KeyError(f"No {repo_type} repository {repo_id!r} on this local hub")
            files = repo.commits[self.app._resolve(repo, revision)].files  # never mutated: commits make new dicts
        return {path: self.app._read(entry) for path, entry in files.items()}


def main(argv: list[str] | None = None) -> None:
    """`python -m tools.local_hub ROOT`: serve a folder until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root_dir", help="folder holding the repositories")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--user", default="local-user", help="account name the token belongs to")
    parser.add_argument("--token", help="write token to accept (default: a new random one)")
    args = parser.parse_args(argv)
    with LocalHub(args.root_dir, token=args.token, port=args.port, user=args.user) as hub:
        print("Local hub running. Set these before importing huggingface_hub or transformers:")
        for name, value in hub.environment().items():
            print(f"  export {name}={quote(value, safe=':/._-')}")
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
