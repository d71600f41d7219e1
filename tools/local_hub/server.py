"""`LocalHub`: the public server object (start, stop, point clients at it, inspect what was pushed)."""

from __future__ import annotations

import logging
import os
import secrets
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .app import DEFAULT_MAX_BODY_SIZE, DEFAULT_MAX_LFS_SIZE, DEFAULT_UPLOAD_TTL, HubApp
from .connections import DEFAULT_MAX_CONNECTIONS, DEFAULT_REQUEST_TIMEOUT, Server
from .handler import Handler
from .repository import DEFAULT_BRANCH, REPO_NAME

logger = logging.getLogger(__name__)


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
            if not REPO_NAME.match(name):
                raise ValueError(f"Invalid user name {name!r}: letters, digits, '-', '_', '.'")
        self.app = HubApp(self.root_dir, accounts, {user: list(orgs)}, **limits)
        self._limits = {"max_connections": max_connections, "request_timeout": request_timeout}
        self._port = port
        self._server: Server | None = None
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
            replace(
                constants, "HUGGINGFACE_CO_URL_TEMPLATE", self.endpoint + "/{repo_id}/resolve/{revision}/{filename}"
            )
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
        self._server = Server(("127.0.0.1", self._port), Handler, **self._limits)
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
