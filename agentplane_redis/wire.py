"""A script call sent over a plain client's own pool, packed by the store.

redis-py's ``execute_command`` serves every command: it passes each argument
through the client's encoder, looks at the command for its special cases and
records its own metrics. A store's calls are all alike: ``FCALL`` (or
``EVALSHA``) of a function whose name and keys are the same on every call of
one operation, then strings and integers. So the driver of a plain, pooled
``redis.Redis`` (``Wire``) or ``redis.asyncio.Redis`` (``AsyncWire``) packs
the fixed head of each operation once, the rest of a call in one pass
(arguments as UTF-8, as the contract's identifiers are), and sends it on a
connection of the client's own pool with the client's own retry policy: a
connection error or timeout disconnects the connection and sends the call
again, as ``execute_command`` does (the call token makes that safe). The
reply is read undecoded, as the driver asks of ``execute_command``.
redis-py's own command metrics (OpenTelemetry) do not see these calls.

A client this does not fit (a single-connection client, client-side caching,
redis-py before 6.0, whose failure handling differs, a cluster client, anything
that is neither a ``redis.Redis`` nor a ``redis.asyncio.Redis``) keeps
``execute_command``: ``wire_for`` and ``async_wire_for`` answer None. On a
cluster the driver asks for a wire on a plain client of the slot's master:
the ``redis.Redis`` the sync cluster client keeps for it, or the store's own
``redis.asyncio.Redis`` of it.
"""

from __future__ import annotations

import os
import select
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import redis
import redis.asyncio
from redis.exceptions import ConnectionError, ResponseError, TimeoutError

Arg = str | int | bytes


def _data(value: Arg) -> bytes:
    """One argument's bytes: UTF-8 of a str, decimal digits of an int."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return b"%d" % value
    raise TypeError(f"a command argument cannot be a {type(value).__name__}")


#: The head of a bulk string of each usual length, ``$<length>\r\n``.
_HEADS = tuple(b"$%d\r\n" % n for n in range(512))
_CRLF = b"\r\n"


def bulks(values: Sequence[Arg]) -> bytes:
    """Arguments as RESP bulk strings, one after another (a str, the usual case,
    encoded inline; the head of a usual length taken from ``_HEADS``), joined once."""
    out: list[bytes] = []
    add = out.append
    for value in values:
        data = value.encode() if type(value) is str else _data(value)
        size = len(data)
        add(_HEADS[size] if size < 512 else b"$%d\r\n" % size)
        add(data)
        add(_CRLF)
    return b"".join(out)


def pack(args: Sequence[Arg]) -> bytes:
    """A whole command, as redis-py would pack it."""
    return b"*%d\r\n" % len(args) + bulks(args)


def _major(version: str) -> int:
    try:
        return int(version.split(".", maxsplit=1)[0])
    except ValueError:
        return 0


def _pool(client: Any, kind: type) -> Any:
    """The pool of a plain pooled client of this kind, or None."""
    if not isinstance(client, kind) or _major(redis.__version__) < 6:
        return None
    if getattr(client, "connection", None) is not None or getattr(
        client, "single_connection_client", False
    ):
        return None
    pool = getattr(client, "connection_pool", None)
    if pool is None or getattr(pool, "cache", None) is not None:
        return None
    if not all(hasattr(pool, name) for name in ("get_connection", "release")):
        return None
    return pool


def wire_for(client: Any) -> Wire | None:
    """A ``Wire`` on a sync client's pool, or None where ``execute_command`` must serve."""
    pool = _pool(client, redis.Redis)
    return None if pool is None else Wire(pool)


def async_wire_for(client: Any) -> AsyncWire | None:
    """An ``AsyncWire`` on an asyncio client's pool, or None."""
    pool = _pool(client, redis.asyncio.Redis)
    return None if pool is None else AsyncWire(pool)


#: A pool lends one of its connections to be kept between calls only when it has at
#: least this many (redis-py's default is 100), so that what it lends never starves it.
KEEP_FROM = 32


#: Packed call heads a wire keeps, at most.
MAX_PREFIXES = 4096


class _Kept:
    """The one connection of a pool kept between calls, by every wire on that pool."""

    __slots__ = ("__weakref__", "idle", "pid")

    def __init__(self) -> None:
        #: At most one connection (a list: its pop and append are atomic).
        self.idle: list[Any] = []
        self.pid = os.getpid()


_KEPT: weakref.WeakKeyDictionary[Any, _Kept] = weakref.WeakKeyDictionary()
_KEPT_LOCK = threading.Lock()


def _kept(pool: Any) -> _Kept | None:
    """What a pool keeps between calls, or None for a pool that lends per call."""
    if type(pool) is not redis.ConnectionPool or pool.max_connections < KEEP_FROM:
        return None
    with _KEPT_LOCK:
        kept = _KEPT.get(pool)
        if kept is None:
            kept = _KEPT[pool] = _Kept()
        return kept


class Wire:
    """Sends packed commands on connections of one pool.

    Between calls the pool's connection last used is kept (one per pool, shared by
    every store on it) instead of handed back: taking one from redis-py's pool and
    giving it back costs as much client time as packing and reading a call. Before
    it is used again the kept connection is checked as the pool checks the
    connections it hands out (``_ready``: closed by the server, killed, or
    something arrived unasked); if so, it is closed and the pool hands out a
    connection anew. A call that fails in any other way than an error reply gives
    its connection back to the pool closed. A process forked from one that used
    the pool keeps nothing of its parent's. Only a plain ``ConnectionPool`` of at
    least ``KEEP_FROM`` connections lends one so (a ``BlockingConnectionPool``
    waits for what it lends, a Sentinel pool has its own idea of the master): any
    other pool is asked on each call.
    """

    __slots__ = ("_kept", "_prefixes", "pool")

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        #: For each call head (command, function, key count, keys): how many arguments
        #: it is and its packed bytes. A script with a bucket key has one per bucket
        #: it was called with, so the table is emptied when it grows large.
        self._prefixes: dict[tuple[Arg, ...], tuple[int, bytes]] = {}
        self._kept = _kept(pool)

    def packed(self, head: tuple[Arg, ...], tail: Sequence[Any]) -> bytes:
        """``*head, *tail`` packed, where ``tail`` starts with the key count and the
        keys, the same on every call with this head."""
        fixed = 1 + tail[0]
        whole = (*head, *tail[:fixed])
        known = self._prefixes.get(whole)
        if known is None:
            if len(self._prefixes) >= MAX_PREFIXES:
                self._prefixes.clear()
            known = self._prefixes[whole] = (len(head) + fixed, bulks(whole))
        count, prefix = known
        rest = tail[fixed:]
        return b"*%d\r\n%b%b" % (count + len(rest), prefix, bulks(rest))

    def call(
        self, head: tuple[Arg, ...], tail: Sequence[Any], again: Sequence[Any] | None = None
    ) -> Any:
        """The reply to ``*head, *tail``; a retry of the client sends ``*head, *again``
        instead, where given."""
        again_packed = None if again is None else lambda: self.packed(head, again)
        return self.send(self.packed(head, tail), again_packed)

    def send(self, packed: bytes, again: Callable[[], bytes] | None = None) -> Any:
        """The reply to one packed command, undecoded; errors raised as redis-py raises
        them (a ``ResponseError`` the server answered, a ``ConnectionError`` once the
        client's retries are spent). The client's retries send ``again()`` where given."""
        conn = self._take()
        try:
            reply = conn.retry.call_with_retry(
                _attempts(conn, packed, again), lambda _error: conn.disconnect()
            )
        except ResponseError:  # an error reply, read whole: the connection is sound
            self._give_back(conn)
            raise
        except BaseException:  # a reply may be half read: closed, and back to the pool
            conn.disconnect()
            self.pool.release(conn)
            raise
        self._give_back(conn)
        return reply

    def _take(self) -> Any:
        kept = self._kept
        if kept is None:
            return self.pool.get_connection()
        if kept.pid != os.getpid():  # a forked process: its parent's connection is not its own
            kept.idle, kept.pid = [], os.getpid()
        try:
            conn = kept.idle.pop()
        except IndexError:
            return self.pool.get_connection()
        if _ready(conn):  # closed, killed, or something arrived unasked: connected anew
            conn.disconnect()
            self.pool.release(conn)
            return self.pool.get_connection()
        return conn

    def _give_back(self, conn: Any) -> None:
        reconnect = getattr(conn, "should_reconnect", None)
        if reconnect is not None and reconnect():  # a server's maintenance notice
            conn.disconnect()
            conn.connect()
        kept = self._kept
        if kept is not None and not kept.idle:
            kept.idle.append(conn)
        else:
            self.pool.release(conn)


def _ready(conn: Any) -> bool:
    """Whether an idle connection has something to read (a server's close, an
    unasked message) or is closed: one ``select`` on its socket, or ``can_read``
    where the socket is not a real one."""
    sock = getattr(conn, "_sock", None)
    if sock is None:
        return True
    try:
        return bool(select.select((sock,), (), (), 0)[0])
    except (TypeError, ValueError, OSError):
        pass
    try:
        return bool(conn.can_read(timeout=0))
    except (ConnectionError, TimeoutError, OSError):
        return True


def _round_trip(conn: Any, packed: bytes) -> Any:
    conn.send_packed_command([packed])
    return conn.read_response(disable_decoding=True)


def _attempts(conn: Any, packed: bytes, again: Callable[[], bytes] | None) -> Callable[[], Any]:
    """Each attempt of a call: ``packed`` first, then ``again()`` (or ``packed``)."""
    if again is None:
        return lambda: _round_trip(conn, packed)
    sends = [packed]

    def attempt() -> Any:
        if sends:
            return _round_trip(conn, sends.pop())
        return _round_trip(conn, again())

    return attempt


class AsyncWire(Wire):
    """The same on an asyncio client's pool: ``call`` and ``send`` are awaited, and a
    connection is taken from the pool for each call (none is kept)."""

    __slots__ = ()

    async def call(
        self, head: tuple[Arg, ...], tail: Sequence[Any], again: Sequence[Any] | None = None
    ) -> Any:
        again_packed = None if again is None else lambda: self.packed(head, again)
        return await self.send(self.packed(head, tail), again_packed)

    async def send(self, packed: bytes, again: Callable[[], bytes] | None = None) -> Any:
        pool = self.pool
        conn = await pool.get_connection()
        sends = [packed]

        async def attempt() -> Any:
            if sends:
                return await _async_round_trip(conn, sends.pop())
            return await _async_round_trip(conn, packed if again is None else again())

        try:
            return await conn.retry.call_with_retry(attempt, lambda _error: conn.disconnect())
        finally:
            await pool.release(conn)


async def _async_round_trip(conn: Any, packed: bytes) -> Any:
    await conn.send_packed_command([packed])
    return await conn.read_response(disable_decoding=True)
