"""Read keys in pipelined batches: type, TTL, length and an encoding-independent digest per key.

Two round trips per batch: ``TYPE`` + ``PTTL`` for every key, then the length command and the first
page of the value for every key. Keys longer than one page are continued page by page afterwards
(HSCAN/SSCAN/ZSCAN cursors, LRANGE and GETRANGE windows, XRANGE from the last id), so memory per key is
bounded by the page size whatever the key's size. A key that changes type or is rewritten between the
reads gets status ``unstable`` (the recheck decides); a key that disappears gets ``vanished``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from hiredis import ReplyError

from audit.sources.redis.digest import OrderedDigest, UnorderedDigest
from audit.sources.redis.resp import Command, RespPipe

OK, UNSTABLE, VANISHED, ERROR = "ok", "unstable", "vanished", "error"

_LEN_CMD = {
    b"string": b"STRLEN",
    b"hash": b"HLEN",
    b"list": b"LLEN",
    b"set": b"SCARD",
    b"zset": b"ZCARD",
    b"stream": b"XLEN",
}


class KeyState(NamedTuple):
    key: bytes
    type: str
    ttl_ms: int | None
    expire_at_ms: int | None
    length: int
    digest: str | None
    status: str
    error: str | None
    read_at_ms: int


def _first_page(type_: bytes, key: bytes, page: int, window_bytes: int) -> Command:
    p = b"%d" % page
    if type_ == b"string":
        return (b"GETRANGE", key, b"0", b"%d" % (window_bytes - 1))
    if type_ == b"hash":
        return (b"HSCAN", key, b"0", b"COUNT", p)
    if type_ == b"list":
        return (b"LRANGE", key, b"0", b"%d" % (page - 1))
    if type_ == b"set":
        return (b"SSCAN", key, b"0", b"COUNT", p)
    if type_ == b"zset":
        return (b"ZSCAN", key, b"0", b"COUNT", p)
    return (b"XRANGE", key, b"-", b"+", b"COUNT", p)


def _next_stream_id(entry_id: bytes) -> bytes:
    """The smallest id after `entry_id`: XRANGE's exclusive '(' is 6.2+ only, and Pika lacks it."""
    ms, _, seq = entry_id.partition(b"-")
    return b"%d-%d" % (int(ms), int(seq or b"0") + 1)


class KeyReader:
    """Reads batches of keys of the currently selected database through one pipe."""

    def __init__(self, pipe: RespPipe, page: int, window_bytes: int) -> None:
        self.pipe = pipe
        self.page = page
        self.window_bytes = window_bytes

    def read(self, keys: Sequence[bytes]) -> list[KeyState]:
        if not keys:
            return []
        cmds: list[Command] = []
        for k in keys:
            cmds.append((b"TYPE", k))
            cmds.append((b"PTTL", k))
        t0 = time.time()
        head = self.pipe.execute(cmds)
        read_at = int((t0 + time.time()) * 500)  # midpoint, in ms
        body_cmds: list[Command] = []
        live: list[tuple[bytes, bytes, Any]] = []
        out: list[KeyState] = []
        for i, k in enumerate(keys):
            type_, pttl = head[2 * i], head[2 * i + 1]
            if isinstance(type_, ReplyError) or isinstance(pttl, ReplyError):
                out.append(
                    KeyState(
                        k,
                        "",
                        None,
                        None,
                        0,
                        None,
                        ERROR,
                        str(type_ if isinstance(type_, ReplyError) else pttl),
                        read_at,
                    )
                )
                continue
            if type_ == b"none" or pttl == -2:
                out.append(KeyState(k, "", None, None, 0, None, VANISHED, None, read_at))
                continue
            len_cmd = _LEN_CMD.get(type_)
            if len_cmd is None:  # module types: nothing generic reads them
                out.append(
                    KeyState(
                        k,
                        type_.decode(),
                        None,
                        None,
                        0,
                        None,
                        ERROR,
                        f"type {type_.decode()} has no generic read",
                        read_at,
                    )
                )
                continue
            live.append((k, type_, pttl))
            body_cmds.append((len_cmd, k))
            body_cmds.append(_first_page(type_, k, self.page, self.window_bytes))
        body = self.pipe.execute(body_cmds)
        for j, (k, type_, pttl) in enumerate(live):
            out.append(self._finish(k, type_, pttl, body[2 * j], body[2 * j + 1], read_at))
        return out

    def _finish(self, key: bytes, type_: bytes, pttl: int, length: Any, page: Any, read_at: int) -> KeyState:
        ttl = None if pttl < 0 else pttl
        expire_at = None if ttl is None else read_at + ttl
        tname = type_.decode()
        if isinstance(length, ReplyError) or isinstance(page, ReplyError):
            err = str(length if isinstance(length, ReplyError) else page)
            status = UNSTABLE if err.startswith("WRONGTYPE") else ERROR
            return KeyState(key, tname, ttl, expire_at, 0, None, status, err, read_at)
        if length == 0 and type_ != b"string":
            return KeyState(key, tname, ttl, expire_at, 0, None, VANISHED, None, read_at)
        try:
            digest, complete = self._digest(key, type_, length, page)
        except ReplyError as e:
            return KeyState(key, tname, ttl, expire_at, length, None, ERROR, str(e), read_at)
        status = OK if complete else UNSTABLE
        return KeyState(key, tname, ttl, expire_at, length, digest, status, None, read_at)

    def _digest(self, key: bytes, type_: bytes, length: int, page: Any) -> tuple[str, bool]:
        """Digest of the whole value, continuing past the first page; False if it changed meanwhile."""
        if type_ in (b"hash", b"set", b"zset"):
            u = UnorderedDigest(type_.decode())
            add = {b"hash": u.add_hash_page, b"set": u.add_set_page, b"zset": u.add_zset_page}[type_]
            cursor, items = page
            add(items)
            scan_cmd = {b"hash": b"HSCAN", b"set": b"SSCAN", b"zset": b"ZSCAN"}[type_]
            while cursor != b"0":
                cursor, items = self._one((scan_cmd, key, cursor, b"COUNT", b"%d" % self.page))
                add(items)
            return u.hexdigest(), u.count == length
        o = OrderedDigest(type_.decode())
        if type_ == b"string":
            o.add_bytes(page)
            got = len(page)
            while got < length:
                chunk = self._one((b"GETRANGE", key, b"%d" % got, b"%d" % (got + self.window_bytes - 1)))
                if not chunk:
                    break
                o.add_bytes(chunk)
                got += len(chunk)
            return o.hexdigest(), got == length
        if type_ == b"list":
            o.add_elements(page)
            while len(page) == self.page and o.count < length:
                page = self._one((b"LRANGE", key, b"%d" % o.count, b"%d" % (o.count + self.page - 1)))
                o.add_elements(page)
            return o.hexdigest(), o.count == length
        o.add_stream_entries(page)
        while len(page) == self.page and o.count < length:
            start = _next_stream_id(page[-1][0])
            page = self._one((b"XRANGE", key, start, b"+", b"COUNT", b"%d" % self.page))
            o.add_stream_entries(page)
        return o.hexdigest(), o.count == length

    def _one(self, cmd: Command) -> Any:
        reply = self.pipe.execute([cmd])[0]
        if isinstance(reply, ReplyError):
            raise reply
        return reply
