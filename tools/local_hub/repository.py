"""What a repository is: refs and commits, each commit a full snapshot of file entries (stored as repos/*.json)."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from datetime import datetime, timezone

REPO_TYPES = ("model", "dataset", "space")
DEFAULT_BRANCH = "main"
# The Hub stores these in LFS whatever .gitattributes says (huggingface_hub's docs: "files larger than 10MB").
LFS_SIZE_THRESHOLD = 10 * 1024 * 1024
# The `.gitattributes` the Hub writes in a new repository's initial commit.
DEFAULT_GITATTRIBUTES = "".join(
    f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
    for pattern in (
        "*.7z",
        "*.arrow",
        "*.bin",
        "*.bz2",
        "*.ckpt",
        "*.ftz",
        "*.gz",
        "*.h5",
        "*.joblib",
        "*.lfs.*",
        "*.mlmodel",
        "*.model",
        "*.msgpack",
        "*.npy",
        "*.npz",
        "*.onnx",
        "*.ot",
        "*.parquet",
        "*.pb",
        "*.pickle",
        "*.pkl",
        "*.pt",
        "*.pth",
        "*.rar",
        "*.safetensors",
        "saved_model/**/*",
        "*.tar.*",
        "*.tar",
        "*.tflite",
        "*.tgz",
        "*.wasm",
        "*.xz",
        "*.zip",
        "*.zst",
        "*tfevents*",
    )
)
REPO_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?$")
COMMIT_ID = re.compile(r"^[0-9a-f]{40}$")


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


def git_blob_oid(content: bytes) -> str:
    """The sha1 git gives a blob: what the Hub reports as a regular file's oid and ETag."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The small text git stores in place of an LFS file."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def timestamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
