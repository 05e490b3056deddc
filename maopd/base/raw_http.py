"""A misbehaving HTTP server on 127.0.0.1 for client tests and the hostile-inputs harness: it
answers every request with the bytes the caller gives, at the pace the caller gives, which no
well-behaved server framework allows (a body sent a byte at a time, a ``Content-Length`` that lies,
JSON that is not the protocol)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterable


def http_answer(body: bytes | str | object, status: int = 200, length: bool = True) -> bytes:
    """A whole HTTP/1.1 answer; ``body`` that is not bytes or text is sent as JSON."""
    if not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    data = body.encode() if isinstance(body, str) else body
    head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nConnection: close\r\n"
    head += f"Content-Length: {len(data)}\r\n" if length else ""
    return (head + "\r\n").encode() + data


class RawServer:
    """Answers each connection with ``answer(request_bytes)``: an iterable of byte pieces, each sent
    after ``pause_s``. Holds at most ``seconds`` per connection, so a test that fails cannot hang."""

    def __init__(self, answer, pause_s: float = 0.0, seconds: float = 10.0):
        self.answer, self.pause_s, self.seconds = answer, pause_s, seconds
        self.requests: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self.listener.accept()
            except OSError:
                continue
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection: socket.socket) -> None:
        with connection:
            request = _read_request(connection)
            self.requests.append(request)
            pieces: Iterable[bytes] = self.answer(request)
            until = time.monotonic() + self.seconds
            try:
                for piece in pieces:
                    if self._stop.is_set() or time.monotonic() > until:
                        return
                    connection.sendall(piece)
                    time.sleep(self.pause_s)
            except OSError:
                pass  # the client gave up

    def close(self) -> None:
        self._stop.set()
        self.listener.close()

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _read_request(connection: socket.socket) -> bytes:
    connection.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
    )
    while len(body) < length:
        chunk = connection.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def trickle(answer: bytes) -> list[bytes]:
    """``answer`` one byte at a time."""
    return [answer[i : i + 1] for i in range(len(answer))]
