"""Limits against slow clients: each request's deadline on its reads and writes, and the connection slots.

`DeadlineReader` / `DeadlineWriter` wrap a connection so a client dripping bytes (or not reading its answer) is
cut off at the request's deadline; `Server` serves at most `max_connections` at once and, when full, evicts the
slowest connection still waiting for its request.
"""

from __future__ import annotations

import io
import json
import logging
import socket
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .app import HubApp


class Connection(Protocol):
    """What this module reads of a request handler (handler.py's `Handler`): its socket, the current request's
    deadline and timing, and whether it is waiting for a request. A protocol, so that the handler builds on this
    module and not the other way round."""

    connection: socket.socket
    deadline: float
    started: float
    received: int
    waiting: bool


logger = logging.getLogger(__name__)

DEFAULT_MAX_CONNECTIONS = 32
# Seconds a request may take from its first byte to the last byte of its answer (not per read: a client dripping
# a byte at a time would otherwise hold its connection forever); an idle keep-alive connection waits as long.
DEFAULT_REQUEST_TIMEOUT = 30.0
ANSWER_GRACE = 1.0  # seconds past the deadline an answer (a 408 included) may still take to leave
# When every slot is taken, a new client takes the slot of the connection that sends slowest (idle keep-alive
# first, then byte-drippers) among those waiting for a request for at least this long; 503 only if none is.
EVICTABLE_AFTER = 0.5
LINGER_SECONDS, LINGER_BYTES = 1.0, 1 << 20  # what a closing connection reads of a client's unwanted input


class DeadlineReader(io.RawIOBase):
    """The connection's input, read under the current request's deadline.

    A socket timeout bounds one read, so a client sending a byte now and then would hold its connection for
    ever; each read here may only wait what is left of the request's time.
    """

    def __init__(self, handler: Connection):
        self.handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self.handler.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("The request did not arrive before its deadline")
        self.handler.connection.settimeout(remaining)
        count = self.handler.connection.recv_into(buffer)
        self.handler.received += count
        return count


class DeadlineWriter(io.BufferedIOBase):
    """The connection's output, written under the request's deadline (plus ANSWER_GRACE, so a 408 can leave): a
    client that stops reading a download frees its connection like one that stops sending."""

    def __init__(self, handler: Connection):
        self.handler = handler

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        remaining = self.handler.deadline + ANSWER_GRACE - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("The answer did not leave before the request's deadline")
        self.handler.connection.settimeout(remaining)
        self.handler.connection.sendall(data)
        with memoryview(data) as view:
            return view.nbytes


class Server(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` of them. Beyond that a new client takes the slot of the
    slowest connection still waiting for its request (idle or dripping bytes), or gets a quick 503 if every slot
    is doing work: so slow clients cannot keep everyone else out."""

    daemon_threads = True  # a stuck client never keeps the interpreter alive
    app: HubApp

    def __init__(self, *args: Any, max_connections: int, request_timeout: float, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.request_timeout = request_timeout
        self.slots = threading.BoundedSemaphore(max_connections)
        # Open connections and their handlers: `shutdown()` only stops accepting new ones, and a client's pool
        # would go on being served by their threads after `stop()`; a full server evicts the slowest of them.
        self.connections: dict[socket.socket, Connection] = {}
        self.connections_lock = threading.Lock()

    def _evict_slowest(self) -> bool:
        """Close the connection sending slowest among those waiting at least EVICTABLE_AFTER seconds for their
        request, and take its slot once its thread lets go; False if there is none."""
        now = time.monotonic()
        with self.connections_lock:
            waiting = [h for h in self.connections.values() if h.waiting and now - h.started >= EVICTABLE_AFTER]
        if not waiting:
            return False
        victim = min(waiting, key=lambda h: h.received / (now - h.started))
        victim.waiting = False  # not picked twice
        try:
            victim.connection.shutdown(socket.SHUT_RDWR)  # its read returns at once, and its thread ends
        except OSError:
            pass
        return self.slots.acquire(timeout=1.0)

    def process_request(self, request: socket.socket, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False) and not self._evict_slowest():
            body = json.dumps({"error": "The local hub is serving as many connections as it allows; retry"}).encode()
            try:
                request.settimeout(1.0)
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                )
            except OSError:
                pass
            self._linger_and_close(request, wait=0.0)  # not in the accepting thread: no waiting here
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: socket.socket, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def shutdown_request(self, request: socket.socket) -> None:
        self._linger_and_close(request, wait=LINGER_SECONDS)

    @staticmethod
    def _linger_and_close(request: socket.socket, wait: float) -> None:
        """Close after reading (and dropping) what the client still sends, briefly and up to a bound.

        Closing a socket with unread input makes the kernel reset the connection, and the client may lose the
        answer (a 413 for a body it is still sending, a 400 for a bad line): so the server stops sending,
        then drains for at most `wait` seconds and LINGER_BYTES, as web servers do ("lingering close").
        """
        try:
            request.shutdown(socket.SHUT_WR)
            deadline, drained = time.monotonic() + wait, 0
            while drained < LINGER_BYTES:
                request.settimeout(max(deadline - time.monotonic(), 0.0))
                data = request.recv(65536)
                if not data:
                    break
                drained += len(data)
        except OSError:  # nothing more to read now, a timeout, or the client is gone
            pass
        request.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away mid-answer is routine, not a server bug worth a traceback.
        if isinstance(sys.exc_info()[1], OSError):
            logger.debug("local hub: connection from %s ended: %s", client_address[0], sys.exc_info()[1])
        else:
            logger.exception("local hub: error while serving %s", client_address[0])

    def close_connections(self) -> None:
        with self.connections_lock:
            for connection in list(self.connections):
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed by the client
