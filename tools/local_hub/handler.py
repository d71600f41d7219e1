"""HTTP/1.1 requests into `Request`s and `Response`s back: framing, body limits, streaming, safe headers."""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from modeling_minibert.utils.files import temp_file_beside

from .connections import DeadlineReader, DeadlineWriter, Server
from .protocol import HubError, Request, Response

logger = logging.getLogger(__name__)

# Anything but printable ASCII in a header value could end the header (CR, LF) or confuse a client (NUL).
_UNSAFE_IN_HEADER = re.compile(r"[^\x20-\x7e]")


class Handler(BaseHTTPRequestHandler):
    """Turns HTTP/1.1 requests into `Request`s for `server.app` and writes back its `Response`.

    Each request has until `deadline` (the server's `request_timeout` after its first byte) to arrive and be
    answered; an idle connection waits as long for that byte. While it waits for the client (`waiting`), `received` counts its bytes, so
    that a full server can tell the slowest sender (see `Server.process_request`).
    """

    protocol_version = "HTTP/1.1"  # keep-alive, as the client expects; every answer carries Content-Length
    # The version assumed until the request line is parsed: the stdlib's "HTTP/0.9" would answer a malformed
    # request line with a bare body, no status line or headers.
    default_request_version = "HTTP/1.0"
    # Headers and body leave in separate writes: with Nagle's algorithm and the client's delayed ACK, each
    # answer would wait ~40 ms.
    disable_nagle_algorithm = True
    server: Server

    def _declared_length(self) -> int | None:
        """The body's declared size from its framing headers (None: chunked), before any of it is read."""
        codings = [c.strip().lower() for v in self.headers.get_all("Transfer-Encoding") or [] for c in v.split(",")]
        lengths = self.headers.get_all("Content-Length") or []
        if codings:
            if codings != ["chunked"]:
                raise HubError(501, f"Unsupported Transfer-Encoding {', '.join(codings)!r}: only 'chunked'")
            if lengths:  # two framings for one body: the classic request-smuggling shape
                raise HubError(400, "A request may not have both Content-Length and Transfer-Encoding")
            return None
        if not lengths:
            return 0
        if len(lengths) > 1 or not re.fullmatch(r"[0-9]+", lengths[0].strip()):
            raise HubError(400, f"Invalid Content-Length {', '.join(lengths)[:40]!r}: expected one decimal number")
        return int(lengths[0])

    def _body_parts(self, length: int | None, limit: int) -> Iterator[bytes]:
        """The body in parts of at most 1 MiB, at most `limit` bytes; one that ends early or is framed wrong is a 400."""
        if length is not None:
            remaining = length
            while remaining:
                part = self.rfile.read(min(remaining, 1 << 20))
                if not part:
                    raise HubError(400, f"The request body ended after {length - remaining} of {length} bytes")
                remaining -= len(part)
                yield part
            return
        total = 0
        while True:
            line = self.rfile.readline(1026)
            size = line.split(b";")[0].strip()
            if not line.endswith(b"\n") or not re.fullmatch(rb"[0-9a-fA-F]+", size):
                raise HubError(400, f"Invalid chunk size line {line[:40]!r} in a chunked body")
            size = int(size, 16)
            if size == 0:
                for _ in range(100):  # trailers, ignored
                    if self.rfile.readline(8192) in (b"\r\n", b"\n", b""):
                        return
                raise HubError(400, "Too many trailer lines after a chunked body")
            total += size
            if total > limit:
                raise HubError(413, f"Request body is over this hub's limit of {limit} bytes")
            yield from self._body_parts(size, size)
            if self.rfile.readline(3) not in (b"\r\n", b"\n"):
                raise HubError(400, "A chunk of the body is longer than its size line says")

    def _receive_upload(self, length: int | None, limit: int) -> tuple[Path, str, int]:
        """Stream an LFS upload into a hidden file beside the LFS store, hashing it on the way."""
        store = self.server.app.root / "lfs"
        fd, tmp = temp_file_beside(store / "upload")  # hidden, with open()'s permissions
        digest, size = hashlib.sha256(), 0
        try:
            with os.fdopen(fd, "wb") as f:
                for part in self._body_parts(length, limit):
                    digest.update(part)
                    f.write(part)
                    size += len(part)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return Path(tmp), digest.hexdigest(), size

    def _serve(self) -> None:
        split = urlsplit(self.path)
        request = Request(
            method=self.command,
            segments=[unquote(s) for s in split.path.split("/")[1:] if s != ""],
            query=parse_qs(split.query),
            headers=self.headers,
            body=b"",
        )
        app = self.server.app
        try:
            # Everything the headers can tell is settled before a byte of the body is read.
            length = self._declared_length()
            limit = app.admit(request, length)
            if self.headers.get("Expect", "").lower() == "100-continue":
                self.send_response_only(100)
                self.end_headers()
            if request.segments[:1] == ["lfs-upload"]:  # admitted: a PUT to a live upload URL
                request.upload = self._receive_upload(length, limit)
            else:
                request.body = b"".join(self._body_parts(length, limit))
        except HubError as err:
            # The rest of the body (if any) stays unread, so the connection cannot carry another request.
            self.close_connection = True
            self._send(self._error_response(err, {"Connection": "close"}))
            return
        except TimeoutError:
            self.close_connection = True
            message = f"The request body did not arrive within {self.server.request_timeout:g} s"
            self._send(self._error_response(HubError(408, message), {"Connection": "close"}))
            return
        self.waiting = False  # the request is in: its connection is no longer a candidate for eviction
        try:
            response = app.handle(request)
        except HubError as err:
            response = self._error_response(err)
        except Exception as err:  # a bug here must reach the client as a 500, not a dropped connection
            logger.exception("local hub: %s %s failed", self.command, split.path)
            response = Response.json({"error": f"Local hub internal error: {type(err).__name__}: {err}"}, status=500)
        finally:
            if request.upload is not None:
                request.upload[0].unlink(missing_ok=True)  # moved into the store if it was accepted
        self._send(response)

    @staticmethod
    def _error_response(err: HubError, extra: Mapping[str, str] | None = None) -> Response:
        headers = {"X-Error-Message": err.message, **err.headers, **(extra or {})}
        if err.code:
            headers["X-Error-Code"] = err.code
        return Response.json({"error": err.message, **err.body}, status=err.status, headers=headers)

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        length = response.length if response.file is not None else len(response.body)
        for name, value in {**response.headers, "Content-Length": str(length)}.items():
            # Header values echo request data (paths, revisions, names): a CR or LF would start a header of
            # the client's choosing, so only printable ASCII is sent.
            self.send_header(name, _UNSAFE_IN_HEADER.sub("?", value))
        self.end_headers()
        if self.command == "HEAD":
            return
        if response.file is None:
            self.wfile.write(response.body)
            return
        with open(response.file, "rb") as f:
            f.seek(response.start)
            remaining = response.length
            while remaining > 0:
                chunk = f.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                self.wfile.write(chunk)
                remaining -= len(chunk)

    def handle_expect_100(self) -> bool:
        return True  # "100 Continue" only once the headers have passed `admit` (see `_serve`)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _serve

    def setup(self) -> None:
        super().setup()
        self._start_request()
        self.rfile.close()  # the stdlib's reader, replaced (left open, it would keep the socket from closing)
        self.rfile = io.BufferedReader(DeadlineReader(self))
        self.wfile = DeadlineWriter(self)
        with self.server.connections_lock:
            self.server.connections[self.connection] = self

    def _start_request(self) -> None:
        self.started = time.monotonic()
        self.deadline = self.started + self.server.request_timeout
        self.received, self.waiting = 0, True

    def handle_one_request(self) -> None:
        # An idle connection may wait `request_timeout` for a request; the request then has as long again from
        # its first byte (so time a keep-alive connection spent idle is not taken from it).
        self._start_request()
        try:
            if not self.rfile.peek(1):
                self.close_connection = True  # the client closed the connection
                return
        except TimeoutError:
            self.close_connection = True
            return
        self.deadline = time.monotonic() + self.server.request_timeout
        super().handle_one_request()

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.pop(self.connection, None)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        # Request lines only (never headers, so never a token), at debug level rather than on stderr.
        logger.debug("local hub: " + format, *args)
