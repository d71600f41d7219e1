"""The endpoints that write refs and commits: branches, tags, preupload (LFS or regular) and the commit itself.

Mixed into `HubApp` (app.py), which runs them under its lock.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import re
import uuid
from typing import Any

from .paths import tree_conflicts, validate_path
from .protocol import HubError, Request, Response, entry_not_found, json_field, list_of, parse_json, revision_not_found
from .repository import DEFAULT_BRANCH, LFS_SIZE_THRESHOLD, Commit, FileEntry, Repo, timestamp

_REF_NAME = re.compile(r"[A-Za-z0-9._/-]+")


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


def _valid_ref(name: str) -> bool:
    """Branch and tag names: no empty, '.' or '..' parts (git's rules, in short)."""
    return bool(_REF_NAME.fullmatch(name)) and all(part not in ("", ".", "..") for part in name.split("/"))


class CommitRoutes:
    """`HubApp`'s write endpoints for refs and commits."""

    def _create_branch(self, request: Request, repo_type: str, repo_id: str, branch: str) -> Response:
        repo = self._repo(request, repo_type, repo_id, write=True)
        if branch in repo.branches:
            raise HubError(409, f"Reference already exists: branch {branch!r} in {repo_id}")
        if not _valid_ref(branch) or branch.startswith("refs/"):
            raise HubError(400, f"Invalid branch name {branch!r}")
        start = json_field(request.json(), "startingPoint", str, DEFAULT_BRANCH)
        if not start:
            raise HubError(400, "Invalid startingPoint '': name a branch, tag or commit")
        repo.branches = {**repo.branches, branch: self._resolve(repo, start)}  # a new dict: see `Repo`
        self._save(repo)
        return Response.json({})

    def _create_tag(self, request: Request, repo_type: str, repo_id: str, revision: str) -> Response:
        repo = self._repo(request, repo_type, repo_id, write=True)
        tag = json_field(request.json(), "tag", str)
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
            raise revision_not_found(repo, name)
        if kind == "branch" and name == DEFAULT_BRANCH:
            raise HubError(403, f"Cannot delete the default branch {DEFAULT_BRANCH!r}")
        remaining = {ref: target for ref, target in table.items() if ref != name}  # a new dict: see `Repo`
        setattr(repo, "branches" if kind == "branch" else "tags", remaining)
        self._save(repo)
        return Response.json({})

    def _branch_head(self, repo: Repo, revision: str) -> tuple[str, str]:
        """(branch name, head commit) for a revision a commit may go on: a branch or a PR ref."""
        name = revision[len("refs/heads/") :] if revision.startswith("refs/heads/") else revision
        if name in repo.branches:
            return name, repo.branches[name]
        if name in repo.pull_requests:
            return name, repo.pull_requests[name]
        if name in repo.tags or name in repo.commits:
            raise HubError(400, f"Cannot commit to {revision!r}: it is a tag or a commit, not a branch")
        raise revision_not_found(repo, revision)

    def _preupload(self, request: Request, repo_type: str, repo_id: str, revision: str) -> Response:
        repo = self._repo(request, repo_type, repo_id, write=True)
        _, head = self._branch_head(repo, DEFAULT_BRANCH if request.flag("create_pr") else revision)
        files = repo.commits[head].files
        payload = request.json()
        gitattributes = self._read(files[".gitattributes"]).decode() if ".gitattributes" in files else ""
        lfs_patterns = _lfs_patterns(gitattributes)
        ignore = [
            line.strip()
            for line in json_field(payload, "gitIgnore", str, "").splitlines()
            if line.strip() and not line.startswith("#")
        ]
        answers = []
        for item in list_of(json_field(payload, "files", list), dict, "files"):
            path = validate_path(json_field(item, "path", str, where="files[]"))
            try:
                sample = base64.b64decode(json_field(item, "sample", str, "", where=path), validate=True)
            except binascii.Error:
                raise HubError(400, f"File {path}: sample must be base64") from None
            size = json_field(item, "size", int, 0, where=path)
            is_lfs = _matches(path, lfs_patterns) or size >= LFS_SIZE_THRESHOLD or b"\0" in sample
            existing = files.get(path)
            oid = None
            if existing is not None:  # what the client compares with its own hash to skip unchanged files
                oid = existing.lfs_sha256 if is_lfs else (None if existing.is_lfs else existing.oid)
            answers.append(
                {
                    "path": path,
                    "uploadMode": "lfs" if is_lfs else "regular",
                    "shouldIgnore": _matches(path, ignore),
                    "oid": oid,
                }
            )
        return Response.json({"files": answers, "commitOid": head})

    def _commit(self, request: Request, repo_type: str, repo_id: str, revision: str) -> Response:
        repo = self._repo(request, repo_type, repo_id, write=True)
        user = self._require_user(request)
        try:
            text = request.body.decode()
        except UnicodeDecodeError:
            raise HubError(400, "Commit payload is not UTF-8") from None
        lines = [parse_json(line, "A commit payload line") for line in text.splitlines() if line.strip()]
        if not all(isinstance(line, dict) for line in lines):
            raise HubError(400, "Commit payload: every line must be a JSON object")
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "Commit payload must start with a header line")
        header = json_field(lines[0], "value", dict, where="Commit header")
        title = json_field(header, "summary", str, "", where="Commit header")
        message = json_field(header, "description", str, "", where="Commit header")
        parent_commit = json_field(header, "parentCommit", str, None, where="Commit header")
        create_pr = request.flag("create_pr")
        branch, head = self._branch_head(repo, DEFAULT_BRANCH if create_pr else revision)
        if parent_commit and parent_commit != head:
            raise HubError(412, f"A commit has happened since {parent_commit}: the head of {branch} is {head}")
        files = dict(repo.commits[head].files)
        added: set[str] = set()
        for line in lines[1:]:
            key, value = line.get("key"), json_field(line, "value", dict, where="Commit operation")
            path = validate_path(value.get("path", ""))
            if key == "file":
                try:
                    content = base64.b64decode(json_field(value, "content", str, where=path), validate=True)
                except binascii.Error:
                    raise HubError(400, f"File {path}: content must be base64") from None
                files[path] = FileEntry(size=len(content), oid=self._store_blob(content))
                added.add(path)
            elif key == "lfsFile":
                files[path] = self._lfs_entry(repo, path, value)
                added.add(path)
            elif key == "deletedFile":
                if files.pop(path, None) is None:
                    raise entry_not_found(path, revision, head)
            elif key == "deletedFolder":
                inside = [p for p in files if p.startswith(path.rstrip("/") + "/")]
                if not inside:
                    raise entry_not_found(path, revision, head)
                for p in inside:
                    del files[p]
            else:
                raise HubError(400, f"Unknown commit operation {str(key)[:40]!r}")
        conflict = tree_conflicts(files, added)
        if conflict:
            raise HubError(400, f"Invalid commit: {conflict}")
        now = timestamp()
        commit_id = hashlib.sha1(f"{head}/{now}/{uuid.uuid4()}".encode()).hexdigest()
        # The commit goes in before a ref names it, and refs change as new dicts: see `Repo`.
        repo.commits[commit_id] = Commit(commit_id, [head], title, message, now, user, files)
        data: dict[str, Any] = {
            "success": True,
            "commitOid": commit_id,
            "hookOutput": "",
            "commitUrl": f"{self._repo_url(repo_type, repo_id)}/commit/{commit_id}",
        }
        if create_pr:
            number = len(repo.pull_requests) + 1
            repo.pull_requests = {**repo.pull_requests, f"refs/pr/{number}": commit_id}
            data["pullRequestUrl"] = f"{self._repo_url(repo_type, repo_id)}/discussions/{number}"
        else:
            repo.branches = {**repo.branches, branch: commit_id}
        self._save(repo)
        return Response.json(data)
