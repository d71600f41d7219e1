"""The Hub's behaviour over a folder, independent of HTTP: `HubApp.handle(request) -> response`.

This file holds auth, lookups, dispatch and the account and repository endpoints; the read, commit and LFS
endpoints and the storage are the mixins it is made of (reads.py, commits.py, lfs.py, storage.py).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import threading
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import yaml

from .commits import CommitRoutes
from .lfs import LfsRoutes, UploadTicket
from .protocol import HubError, Request, Response, json_field, repo_not_found, revision_not_found
from .reads import ReadRoutes
from .repository import (
    COMMIT_ID,
    DEFAULT_BRANCH,
    DEFAULT_GITATTRIBUTES,
    REPO_NAME,
    REPO_TYPES,
    Commit,
    FileEntry,
    Repo,
    timestamp,
)
from .storage import Storage

DEFAULT_MAX_BODY_SIZE = 64 * 1024 * 1024  # LFS uploads are capped by their declared size instead
# The largest LFS object an upload URL is given for: ample for a demo, and a bound on what one client can make
# the server write to disk (the Hub itself takes up to 50 GB per file).
DEFAULT_MAX_LFS_SIZE = 5 * 1024**3
DEFAULT_UPLOAD_TTL = 900.0  # seconds an LFS upload URL stays valid, like the Hub's pre-signed storage URLs
# The one message for which huggingface_hub does *not* turn a 401 into RepositoryNotFoundError.
_BAD_TOKEN_MESSAGE = "Invalid credentials in Authorization header"
_XET_MESSAGE = (
    "This local hub speaks plain Git LFS, not Xet: set HF_HUB_DISABLE_XET=1 before huggingface_hub is imported"
)


class HubApp(Storage, ReadRoutes, CommitRoutes, LfsRoutes):
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
        self._load_repos()

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
            raise repo_not_found(repo_id, 401 if user is None else 404)
        if write and not self._may_write(user, repo.namespace):
            raise HubError(403, f"You don't have the rights to write to {repo_id}")
        return repo

    def _resolve(self, repo: Repo, revision: str) -> str:
        revision = revision or DEFAULT_BRANCH
        for prefix, refs in (("refs/heads/", repo.branches), ("refs/tags/", repo.tags)):
            if revision.startswith(prefix) and revision[len(prefix) :] in refs:
                return refs[revision[len(prefix) :]]
        if revision in repo.pull_requests:
            return repo.pull_requests[revision]
        if revision in repo.branches:
            return repo.branches[revision]
        if revision in repo.tags:
            return repo.tags[revision]
        if COMMIT_ID.match(revision) and revision in repo.commits:
            return revision
        raise revision_not_found(repo, revision)

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
            raise HubError(
                413, f"Request body of {length} bytes is over this hub's limit of {self.max_body_size} bytes"
            )
        if self._reads_only(request):
            self._user(request)  # a wrong token is refused on any request
        else:
            self._require_user(request)
        return self.max_body_size

    @staticmethod
    def _reads_only(request: Request) -> bool:
        seg, method = request.segments, request.method
        return (
            method in ("GET", "HEAD")
            or method == "POST"
            and (seg == ["api", "validate-yaml"] or (len(seg) >= 5 and seg[0] == "api" and seg[4] == "paths-info"))
        )

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
        return Response.json(
            {
                "type": "user",
                "id": hashlib.sha1(user.encode()).hexdigest()[:24],
                "name": user,
                "fullname": user,
                "email": None,
                "emailVerified": False,
                "isPro": False,
                "orgs": orgs,
                "auth": {"type": "access_token", "accessToken": {"displayName": "local-hub", "role": "write"}},
            }
        )

    def _create_repo(self, request: Request) -> Response:
        user = self._require_user(request)
        payload = request.json()
        repo_type, name, namespace = self._repo_fields(payload, user)
        if repo_type not in REPO_TYPES:
            raise HubError(400, f"Invalid repo type {repo_type!r}: expected one of {REPO_TYPES}")
        if not REPO_NAME.match(name) or "--" in name or ".." in name:
            raise HubError(400, f"Invalid repo name {name!r}: letters, digits, '-', '_', '.'; at most 96 characters")
        if not self._may_write(user, namespace):
            raise HubError(403, f"You don't have the rights to create a {repo_type} under the namespace {namespace!r}")
        repo_id = f"{namespace}/{name}"
        url = self._repo_url(repo_type, repo_id)
        if (repo_type, repo_id) in self.repos:
            # The client reads the existing repo's URL from this answer (create_repo(exist_ok=True)).
            raise HubError(409, f"You already created this {repo_type} repo: {repo_id}", body={"url": url})
        private = json_field(payload, "private", bool, False)
        visibility = json_field(payload, "visibility", str, "private" if private else "public")
        if visibility not in ("public", "private"):
            raise HubError(400, f"Invalid visibility {visibility!r}: 'public' or 'private'")
        private = visibility == "private"
        now = timestamp()
        oid = self._store_blob(DEFAULT_GITATTRIBUTES.encode())
        first = Commit(
            id=hashlib.sha1(f"{repo_type}/{repo_id}/{now}/{uuid.uuid4()}".encode()).hexdigest(),
            parents=[],
            title="initial commit",
            message="",
            date=now,
            author=user,
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
        repo_type = json_field(payload, "type", str, "model")
        name = json_field(payload, "name", str)
        namespace = json_field(payload, "organization", str, user)
        if not REPO_NAME.match(namespace):
            raise HubError(400, f"Invalid namespace {namespace!r}: letters, digits, '-', '_', '.'")
        return repo_type, name, namespace

    def _validate_yaml(self, request: Request) -> Response:
        content = json_field(request.json(), "content", str)
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
