"""The endpoints that read a revision: info, tree and paths-info listings, refs, commits, file downloads.

Mixed into `HubApp` (app.py), whose lookups (`_repo`, `_resolve`) and storage they use; they take no lock.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import yaml

from modeling_minibert.checks_minibert import read_safetensors_header
from modeling_minibert.sharing.model_card import (
    HEADS,  # architecture suffix -> (Auto class, pipeline tag), from AUTO_MAP
)

from .protocol import HubError, Request, Response, entry_not_found, json_field, list_of
from .repository import Commit, Repo


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


class ReadRoutes:
    """`HubApp`'s read endpoints."""

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
                    sibling["lfs"] = {
                        "sha256": entry.lfs_sha256,
                        "size": entry.size,
                        "pointerSize": entry.pointer_size,
                    }
            siblings.append(sibling)
        info: dict[str, Any] = {
            "_id": hashlib.sha1(f"{repo_type}/{repo_id}".encode()).hexdigest()[:24],
            "id": repo_id,
            "author": repo.namespace,
            "sha": commit.id,
            "lastModified": commit.date,
            "createdAt": repo.created_at,
            "private": repo.private,
            "gated": False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": card["tags"] if isinstance(card.get("tags"), list) else [],
            "cardData": card,
            "siblings": siblings,
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
                        (tag for suffix, (_, tag) in HEADS.items() if architecture.endswith(suffix)),
                        None,
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
            raise entry_not_found(path, revision, commit.id)
        if request.flag("recursive"):
            folders = {
                prefix + "/".join(p[len(prefix) :].split("/")[:i])
                for p in below
                for i in range(1, p[len(prefix) :].count("/") + 1)
            }
            paths = sorted(folders) + sorted(below)
        else:
            paths = sorted({prefix + p[len(prefix) :].split("/")[0] for p in below})
        return Response.json(self._entries_json(repo, commit, paths, request.flag("expand")))

    def _paths_info(self, request: Request, repo_type: str, repo_id: str, revision: str) -> Response:
        repo = self._repo(request, repo_type, repo_id)
        commit = repo.commits[self._resolve(repo, revision)]
        if "json" in request.headers.get("Content-Type", ""):
            payload = request.json()
            paths = list_of(json_field(payload, "paths", list), str, "paths")
            expand = json_field(payload, "expand", bool, False)
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
        return Response.json(
            [
                {"id": c.id, "title": c.title, "message": c.message, "date": c.date, "authors": [{"user": c.author}]}
                for c in history
            ]
        )

    def _resolve_file(self, request: Request, repo_type: str, repo_id: str, revision: str, path: str) -> Response:
        repo = self._repo(request, repo_type, repo_id)
        commit_id = self._resolve(repo, revision)
        entry = repo.commits[commit_id].files.get(path)
        if entry is None:
            raise entry_not_found(path, revision, commit_id)
        headers = {
            "X-Repo-Commit": commit_id,
            "ETag": f'"{entry.oid}"',
            "Accept-Ranges": "bytes",
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
                raise HubError(
                    416, f"Invalid Range header: {range_header}", headers={"Content-Range": f"bytes */{entry.size}"}
                )
            first, last = match.groups()
            if first:
                start, end = int(first), min(int(last), entry.size - 1) if last else entry.size - 1
            else:
                start = max(entry.size - int(last), 0)
            if start >= entry.size or start > end:
                raise HubError(
                    416,
                    f"Range {range_header} is outside the file ({entry.size} bytes)",
                    headers={"Content-Range": f"bytes */{entry.size}"},
                )
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{entry.size}"
        return Response(status, headers, file=self._content_path(entry), start=start, length=end - start + 1)
