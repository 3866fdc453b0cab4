"""Local servers for remote-store tests: a static HTTP server (with or without byte-range
support, counting its requests, with faults on chosen paths) and moto's S3 server."""

from __future__ import annotations

import contextlib
import http.server
import os
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


@dataclass(frozen=True)
class Request:
    """One request a test server answered."""

    method: str
    path: str  # the URL path, e.g. "/img.ome.zarr/0/c/0/0/0"
    range: str | None  # the Range header as sent
    status: int


@dataclass
class RequestLog:
    """The requests a test server answered, in order (thread-safe)."""

    entries: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, request: Request) -> None:
        with self.lock:
            self.entries.append(request)

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()

    def gets(self, path: str | None = None) -> list[Request]:
        """The GET requests, all or those of one URL path."""
        with self.lock:
            return [
                r for r in self.entries if r.method == "GET" and (path is None or r.path == path)
            ]


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # readers open dozens of connections at once: socketserver's backlog of 5 would drop
    # the rest, and the clients would wait a second or more to try again
    request_queue_size = 256

    def __init__(self, root: str, ranges: bool) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root
        self.ranges = ranges
        self.log = RequestLog()
        # URL path -> an HTTP status to answer instead, or "drop" (close the connection
        # without answering)
        self.faults: dict[str, int | str] = {}


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the server's folder. With ``server.ranges``, honours single byte ranges
    (``bytes=a-b``, ``bytes=a-``, ``bytes=-n``) with 206 and Content-Range; without, answers
    every GET with the whole file and 200, as a plain static server does."""

    server: _Server

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, directory=args[2].root, **kwargs)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass  # quiet

    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        status = int(code) if str(code).isdigit() else 0
        url_path = self.path.split("?", 1)[0]
        self.server.log.add(Request(self.command, url_path, self.headers.get("Range"), status))

    def _fault(self) -> bool:
        fault = self.server.faults.get(self.path.split("?", 1)[0])
        if fault is None:
            return False
        if fault == "drop":
            self.server.log.add(Request(self.command, self.path, self.headers.get("Range"), 0))
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return True
        self.send_error(int(fault))
        return True

    def do_HEAD(self) -> None:
        if not self._fault():
            super().do_HEAD()

    def do_GET(self) -> None:
        if self._fault():
            return
        wanted = self.headers.get("Range")
        path = self.translate_path(self.path)
        if not self.server.ranges or wanted is None or not os.path.isfile(path):
            super().do_GET()
            return
        size = os.path.getsize(path)
        match = _RANGE.match(wanted.strip())
        if match is None or match.group(1) == match.group(2) == "":
            super().do_GET()  # not a single byte range: the whole file, as RFC 9110 allows
            return
        first, last = match.groups()
        if first == "":  # the last n bytes
            start, stop = max(0, size - int(last)), size
        else:
            start = int(first)
            stop = size if last == "" else min(size, int(last) + 1)
        if start >= size or stop <= start:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        with open(path, "rb") as f:
            f.seek(start)
            body = f.read(stop - start)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self.wfile.write(body)


class HttpServer:
    """A static HTTP server of ``root`` on 127.0.0.1 (a free port), in a thread."""

    def __init__(self, root: str | os.PathLike[str], ranges: bool) -> None:
        self._server = _Server(os.fspath(root), ranges)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        host, port = self._server.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        self.ranges = ranges
        self.log = self._server.log
        self.faults = self._server.faults

    def stop(self) -> None:
        """Stop serving and close the listening socket (later connections are refused)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@contextlib.contextmanager
def http_server(root: str | os.PathLike[str], ranges: bool) -> Iterator[HttpServer]:
    """:class:`HttpServer` for the block."""
    server = HttpServer(root, ranges)
    try:
        yield server
    finally:
        server.stop()


def free_port() -> int:
    """A port nothing listens on (bound then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class S3Server:
    """moto's S3 server on 127.0.0.1, and the storage_options that reach it."""

    endpoint: str
    storage_options: dict[str, Any]


@contextlib.contextmanager
def moto_s3_server() -> Iterator[S3Server]:
    """moto's threaded S3 server on a free port for the block."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        options = {
            "endpoint_url": endpoint,
            "key": "testing",
            "secret": "testing",
        }
        yield S3Server(endpoint, options)
    finally:
        server.stop()
