"""The files under the hub's root: repositories as JSON, git objects in objects/, LFS objects in lfs/.

`Storage` is the part of `HubApp` (app.py) that reads and writes them; every stored file is looked up by a
well-formed object id, never by a path taken from a request.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from modeling_minibert.utils.files import write_bytes, write_text

from .protocol import HubError
from .repository import FileEntry, Repo, git_blob_oid

# Stored files are named by these and nothing else: git blob sha1s in objects/, sha256s in lfs/.
OBJECT_IDS = {"objects": re.compile(r"[0-9a-f]{40}"), "lfs": re.compile(r"[0-9a-f]{64}")}


class Storage:
    """Repositories and objects under `root` (set by `HubApp.__init__`, with `repos` loaded from it)."""

    root: Path
    repos: dict[tuple[str, str], Repo]

    def _load_repos(self) -> None:
        """Create the store's folders if missing and read every repository saved under them."""
        for sub in ("repos", "objects", "lfs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.repos = {}
        for path in sorted((self.root / "repos").glob("*/*/*.json")):
            repo = Repo.from_json(json.loads(path.read_text()))
            self.repos[(repo.repo_type, repo.repo_id)] = repo

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
        if not isinstance(oid, str) or not OBJECT_IDS[store].fullmatch(oid):
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
