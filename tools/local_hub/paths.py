"""Path safety: which names a file in a repository may have, and which snapshots can be checked out."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping

from .protocol import HubError
from .repository import FileEntry

# File names in a repository: what every filesystem a download lands on holds (255 bytes a name), and a bound on
# the whole path that leaves room for a cache folder in front of it.
MAX_NAME_BYTES, MAX_PATH_BYTES = 255, 1024


# Unicode categories no file name needs: controls (C0, DEL, C1 such as U+0085 NEXT LINE), format characters (bidi
# overrides and isolates, zero-width characters, BOM), lone surrogates, and the line and paragraph separators
# (U+2028, U+2029). Each can make a listing show one name and a download write another.
_UNSAFE_CATEGORIES = {
    "Cc": "a control character",
    "Cf": "an invisible formatting (e.g. bidirectional) character",
    "Cs": "a lone surrogate",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
}


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


def validate_path(path: object) -> str:
    if not isinstance(path, str):
        raise HubError(400, f"A path in a repository must be a string, not {type(path).__name__}")
    problem = _path_problem(path)
    if problem:
        raise HubError(400, f"Invalid path in repository {_shown(path)}: {problem}")
    return path


def tree_conflicts(files: Mapping[str, FileEntry], added: set[str]) -> str | None:
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
