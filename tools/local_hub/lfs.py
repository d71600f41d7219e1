"""Git LFS: the batch API, one-time upload URLs, verify, and which repository may point at which object.

An LFS object is reachable only from the repository it was uploaded to (its bytes checked on arrival), and no
answer tells whether another repository holds one. Mixed into `HubApp` (app.py).
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import time
from typing import Any

from .protocol import HubError, Request, Response, json_field, list_of, repo_not_found
from .repository import FileEntry, Repo, git_blob_oid, lfs_pointer
from .storage import OBJECT_IDS


@dataclasses.dataclass(frozen=True)
class UploadTicket:
    """What a one-time LFS upload URL lets its holder do: send these bytes to this repository, until `expires`."""

    sha256: str
    size: int
    repo: tuple[str, str]  # (type, id)
    expires: float  # time.monotonic()


def _sha256(oid: str) -> str:
    if not OBJECT_IDS["lfs"].fullmatch(oid):
        raise HubError(400, f"Invalid LFS oid {oid[:100]!r}: expected a sha256, 64 lowercase hex digits")
    return oid


class LfsRoutes:
    """`HubApp`'s LFS endpoints, and the upload URLs it has handed out (`_upload_tickets`)."""

    max_lfs_size: int
    upload_ttl: float
    _upload_tickets: dict[str, UploadTicket]

    def _lfs_entry(self, repo: Repo, path: str, value: dict) -> FileEntry:
        """The entry of an `lfsFile` commit operation, for an object uploaded to this repository only.

        An object another repository holds is refused with the same words as one that exists nowhere: naming a
        sha256 neither reaches someone else's (maybe private) file nor tells whether it exists.
        """
        sha = _sha256(json_field(value, "oid", str, where=path))
        algo = json_field(value, "algo", str, "sha256", where=path)
        declared = json_field(value, "size", int, None, where=path)
        obj = self._object_path("lfs", sha)
        if algo != "sha256" or sha not in repo.lfs_objects or not obj.is_file():
            raise HubError(
                422, f"LFS object {sha} for {path} was never uploaded to {repo.repo_id}: upload it before committing"
            )
        size = obj.stat().st_size
        if declared not in (None, size):
            raise HubError(422, f"LFS object {sha} for {path} has {size} bytes, not {declared}")
        pointer = lfs_pointer(sha, size)
        return FileEntry(size=size, oid=git_blob_oid(pointer), lfs_sha256=sha, pointer_size=len(pointer))

    def _lfs_object_problem(self, obj: dict) -> str | None:
        sha, size = obj.get("oid"), obj.get("size")
        if not isinstance(sha, str) or not OBJECT_IDS["lfs"].fullmatch(sha):
            return f"oid {str(sha)[:80]!r} is not a sha256 (64 lowercase hex digits)"
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= self.max_lfs_size:
            return (
                f"size {str(size)[:40]} is not a whole number of bytes from 0 to this hub's limit of "
                f"{self.max_lfs_size}"
            )
        return None

    def _lfs_batch(self, request: Request, repo_type: str, repo_id: str) -> Response:
        repo = self._repo(request, repo_type, repo_id, write=True)
        payload = request.json()
        if payload.get("operation") != "upload":
            raise HubError(400, "The local hub's LFS batch API only supports the 'upload' operation")
        now = time.monotonic()
        self._upload_tickets = {k: t for k, t in self._upload_tickets.items() if t.expires > now}  # drop expired
        objects = []
        for obj in list_of(json_field(payload, "objects", list), dict, "objects"):
            problem = self._lfs_object_problem(obj)
            if problem:
                objects.append(
                    {"oid": str(obj.get("oid", ""))[:80], "size": 0, "error": {"code": 422, "message": problem}}
                )
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
        return Response.json(
            {"transfer": "basic", "objects": objects}, headers={"Content-Type": "application/vnd.git-lfs+json"}
        )

    def _holds(self, repo: Repo, sha: str, size: int) -> bool:
        stored = self._object_path("lfs", sha)
        return sha in repo.lfs_objects and stored.is_file() and stored.stat().st_size == size

    def _live_ticket(self, ticket: str) -> UploadTicket:
        found = self._upload_tickets.get(ticket)
        if found is None:
            raise HubError(403, "Unknown or already used LFS upload URL")
        if found.expires <= time.monotonic():
            raise HubError(
                403, f"This LFS upload URL expired (they last {self.upload_ttl:g} s): ask the batch API for a new one"
            )
        return found

    def _lfs_put(self, request: Request, ticket_id: str) -> Response:
        # The ticket in the URL is the authorisation, as with the Hub's pre-signed storage URLs: only a writer of
        # the repository gets one, for one object of a stated size, once, and briefly.
        ticket = self._live_ticket(ticket_id)
        assert request.upload is not None  # the handler streams every upload to a file
        received, actual, length = request.upload
        if actual != ticket.sha256 or length != ticket.size:
            raise HubError(
                400,
                f"Uploaded content has sha256 {actual} and {length} bytes; "
                f"expected {ticket.sha256} and {ticket.size} bytes",
            )
        repo = self.repos.get(ticket.repo)
        if repo is None:
            raise repo_not_found(ticket.repo[1])
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
        sha, size = _sha256(json_field(payload, "oid", str)), json_field(payload, "size", int)
        if not self._holds(repo, sha, size):
            raise HubError(404, f"LFS object {sha} of {size} bytes was not uploaded to {repo_id}")
        return Response.json({})
