"""Requests, answers and errors, independent of the HTTP plumbing; checked reading of JSON request bodies."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .repository import Repo


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


def parse_json(data: bytes | str, what: str) -> Any:
    try:
        return json.loads(data, parse_constant=_reject_constant)  # strict: no NaN / Infinity
    except (ValueError, RecursionError) as err:
        raise HubError(400, f"{what} is not valid JSON: {err}") from None


_REQUIRED = object()


def json_field(
    data: Mapping, name: str, kind: type | tuple[type, ...], default: Any = _REQUIRED, where: str = ""
) -> Any:
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


def list_of(values: list, kind: type, name: str) -> list:
    if not all(isinstance(v, kind) for v in values):
        raise HubError(400, f"Request body: every item of {name!r} must be {kind.__name__}")
    return values


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


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
        data = parse_json(self.body or b"{}", "Request body")
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


def repo_not_found(repo_id: str, status: int = 404) -> HubError:
    return HubError(status, f"Repository not found: {repo_id}", "RepoNotFound")


def revision_not_found(repo: Repo, revision: str) -> HubError:
    message = f"Invalid rev id: {revision} (no such branch, tag or commit in {repo.repo_id})"
    return HubError(404, message, "RevisionNotFound")


def entry_not_found(path: str, revision: str, commit_id: str | None = None) -> HubError:
    headers = {"X-Repo-Commit": commit_id} if commit_id else {}
    return HubError(404, f"Entry not found: {path} does not exist at revision {revision}", "EntryNotFound", headers)
