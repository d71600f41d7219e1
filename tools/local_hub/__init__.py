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
tests/cross_cutting/test_local_hub_security.py holds the cases.

Files, by purpose: repository.py (refs, commits, file entries), storage.py (the root folder), protocol.py
(requests, answers, errors), paths.py (which file names a repository may hold), app.py (auth, dispatch,
repositories) with reads.py, commits.py and lfs.py (the endpoints), handler.py (HTTP framing and bodies),
connections.py (deadlines and connection slots against slow clients), server.py (`LocalHub`), cli.py.
"""

from __future__ import annotations

from .app import DEFAULT_MAX_BODY_SIZE, DEFAULT_MAX_LFS_SIZE, DEFAULT_UPLOAD_TTL, HubApp
from .cli import main
from .connections import DEFAULT_MAX_CONNECTIONS, DEFAULT_REQUEST_TIMEOUT
from .lfs import UploadTicket
from .protocol import HubError, Request, Response
from .repository import (
    DEFAULT_BRANCH,
    DEFAULT_GITATTRIBUTES,
    LFS_SIZE_THRESHOLD,
    REPO_TYPES,
    Commit,
    FileEntry,
    Repo,
    git_blob_oid,
    lfs_pointer,
)
from .server import LocalHub

__all__ = [
    "DEFAULT_BRANCH",
    "DEFAULT_GITATTRIBUTES",
    "DEFAULT_MAX_BODY_SIZE",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_LFS_SIZE",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_UPLOAD_TTL",
    "LFS_SIZE_THRESHOLD",
    "REPO_TYPES",
    "Commit",
    "FileEntry",
    "HubApp",
    "HubError",
    "LocalHub",
    "Repo",
    "Request",
    "Response",
    "UploadTicket",
    "git_blob_oid",
    "lfs_pointer",
    "main",
]
