"""Faults for the reliability tests: a proxy that loses replies on loopback.

``ReplyLosingProxy`` sits between a client and a real server. Every command
reaches the server; when told to, the proxy swallows the next reply and closes
the client's connection, which is exactly a reply lost after the server ran the
command (the client sees a connection error).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any


class ReplyLosingProxy:
    def __init__(self, server_port: int) -> None:
        self.server_port = server_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.to_lose = 0
        self.to_pass = 0
        self.lost = 0
        self.lock = threading.Lock()
        self.open: list[socket.socket] = []
        self.running = True
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def lose_next(self, count: int = 1, *, after: int = 0) -> None:
        """After ``after`` more replies, the next ``count`` (over any connection)
        never reach the client."""
        with self.lock:
            self.to_pass, self.to_lose = after, count

    def _accept(self) -> None:
        while self.running:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.server_port))
            with self.lock:
                self.open += [client, server]
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if replies:
                    with self.lock:
                        drop = self.to_lose > 0 and self.to_pass == 0
                        if self.to_pass:
                            self.to_pass -= 1
                        elif drop:
                            self.to_lose -= 1
                            self.lost += 1
                    if drop:
                        break
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.running = False
        self.listener.close()
        with self.lock:
            for s in self.open:
                s.close()

    def __enter__(self) -> ReplyLosingProxy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
