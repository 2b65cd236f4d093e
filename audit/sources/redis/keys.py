"""Read keys in pipelined batches: type, TTL, length and an encoding-independent digest per key.

Two requests per batch: ``TYPE`` + ``PTTL`` for every key, then one value command per key. A string's
value is one ``GETRANGE 0 window-1`` (no STRLEN: a reply shorter than the window is the whole string,
read atomically); a collection's is its first page (HSCAN/SSCAN/ZSCAN from cursor 0, LRANGE and XRANGE
windows). A first page that holds the whole value (cursor 0, or fewer elements than a page) was read by
one command, so it is one state of the key and its element count is the length: 3 commands per key
whatever its type. A key longer than one page is read again from its start after its length command
(HLEN, SCARD, ZCARD, LLEN, XLEN), page by page, and the length is what tells a page read while the
key changed; memory per key stays bounded by the page size whatever the key's size. A key that
changes type or is rewritten between the reads gets status ``unstable`` (the recheck decides); a key
that disappears gets ``vanished``. An empty page means the key went, but for a stream, which may exist
empty: TYPE tells which.

:class:`BatchPlan` is the batch's state between the two requests, so a caller can keep several batches
in flight on one connection (the snapshot does); :meth:`KeyReader.read` is the one-batch-at-a-time
form. Rows come out columnar (:class:`Rows`), ready for Arrow, with no object per key.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hiredis import ReplyError

from audit.sources.redis.digest import (
    OrderedDigest,
    UnorderedDigest,
    digest_strings,
    hash_hexdigest,
    list_hexdigest,
    set_hexdigest,
    stream_hexdigest,
    zset_hexdigest,
)
from audit.sources.redis.resp import Command, RespPipe, bulk, command_prefix

OK, UNSTABLE, VANISHED, ERROR = "ok", "unstable", "vanished", "error"

_LEN_CMD = {
    b"string": b"STRLEN",
    b"hash": b"HLEN",
    b"list": b"LLEN",
    b"set": b"SCARD",
    b"zset": b"ZCARD",
    b"stream": b"XLEN",
}
_SCAN_CMD = {b"hash": b"HSCAN", b"set": b"SSCAN", b"zset": b"ZSCAN"}
_TYPE_NAMES = {t: t.decode() for t in _LEN_CMD}
_ONE_PAGE: dict[bytes, Callable[[Any], str]] = {
    b"hash": hash_hexdigest,
    b"set": set_hexdigest,
    b"zset": zset_hexdigest,
    b"list": list_hexdigest,
    b"stream": stream_hexdigest,
}
_ONE_ITEM_PER_ELEMENT = frozenset((b"set", b"list", b"stream"))  # a hash or zset page is flat pairs
_HEAD_PREFIX = (command_prefix(b"TYPE", 2), command_prefix(b"PTTL", 2))

Call = Callable[[Command], Any]
"""Sends one command and returns its reply (a ReplyError is returned, not raised)."""


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

    @classmethod
    def vanished(cls, key: bytes, read_at_ms: int) -> KeyState:
        """A key the server does not hold (read at `read_at_ms`)."""
        return cls(key, "", None, None, 0, None, VANISHED, None, read_at_ms)


def expiries_differ(a_ms: int | None, b_ms: int | None, tolerance_ms: int) -> bool:
    """Two reads' absolute expiry times differ: one has none, or they lie further apart than the
    tolerance (two reads' clocks skew a little, as the diff allows: audit/diff/keyspace.py ttl_differs)."""
    if a_ms is None or b_ms is None:
        return (a_ms is None) != (b_ms is None)
    return abs(a_ms - b_ms) > tolerance_ms


@dataclass
class Rows:
    """Columns of read keys (SNAPSHOT_SCHEMA without `db`); vanished keys are counted, not kept."""

    key: list[bytes] = field(default_factory=list)
    type: list[str] = field(default_factory=list)
    ttl_ms: list[int | None] = field(default_factory=list)
    expire_at_ms: list[int | None] = field(default_factory=list)
    length: list[int] = field(default_factory=list)
    digest: list[str | None] = field(default_factory=list)
    status: list[str] = field(default_factory=list)
    error: list[str | None] = field(default_factory=list)
    read_at_ms: list[int] = field(default_factory=list)
    vanished: int = 0
    vanished_keys: list[bytes] = field(default_factory=list)

    def add(
        self,
        key: bytes,
        type_: str,
        ttl: int | None,
        exp: int | None,
        length: int,
        digest: str | None,
        status: str,
        error: str | None,
        read_at: int,
    ) -> None:
        if status == VANISHED:
            self.vanished += 1
            self.vanished_keys.append(key)
            return
        self.key.append(key)
        self.type.append(type_)
        self.ttl_ms.append(ttl)
        self.expire_at_ms.append(exp)
        self.length.append(length)
        self.digest.append(digest)
        self.status.append(status)
        self.error.append(error)
        self.read_at_ms.append(read_at)

    def __len__(self) -> int:
        return len(self.key)

    def states(self) -> list[KeyState]:
        """Row objects (vanished keys included), for callers that read a few keys."""
        kept = [
            KeyState(*r)
            for r in zip(
                self.key,
                self.type,
                self.ttl_ms,
                self.expire_at_ms,
                self.length,
                self.digest,
                self.status,
                self.error,
                self.read_at_ms,
                strict=True,
            )
        ]
        gone = [KeyState.vanished(k, 0) for k in self.vanished_keys]
        return kept + gone


def value_commands(page: int, window_bytes: int) -> dict[bytes, tuple[bytes, bytes]]:
    """Per type, the first value command around the key: (prefix up to the key, suffix after it)."""
    p = bulk(b"%d" % page)
    zero, count = bulk(b"0"), bulk(b"COUNT")
    out = {b"string": (command_prefix(b"GETRANGE", 4), zero + bulk(b"%d" % (window_bytes - 1)))}
    for t, scan in _SCAN_CMD.items():
        out[t] = (command_prefix(scan, 5), zero + count + p)
    out[b"list"] = (command_prefix(b"LRANGE", 4), zero + bulk(b"%d" % (page - 1)))
    out[b"stream"] = (command_prefix(b"XRANGE", 6), bulk(b"-") + bulk(b"+") + count + p)
    return out


def head_request(bulks: Sequence[bytes]) -> bytes:
    """TYPE and PTTL of every key, as one payload (2 replies per key)."""
    t, p = _HEAD_PREFIX
    return t + t.join([b + p + b for b in bulks]) if bulks else b""


class BatchPlan:
    """One batch between its TYPE/PTTL replies and its value replies."""

    __slots__ = ("keys", "n_replies", "payload", "read_at", "rows", "ttls", "value_keys", "value_types")

    def __init__(
        self,
        keys: Sequence[bytes],
        bulks: Sequence[bytes],
        head: Sequence[Any],
        read_at: int,
        commands: dict[bytes, tuple[bytes, bytes]],
    ) -> None:
        self.keys = keys
        self.read_at = read_at
        self.rows = Rows()
        self.value_keys: list[bytes] = []
        self.value_types: list[bytes] = []
        self.ttls: list[int] = []
        parts: list[bytes] = []
        add = self.rows.add
        for k, b, type_, pttl in zip(keys, bulks, head[0::2], head[1::2], strict=True):
            if type_.__class__ is not bytes or pttl.__class__ is not int:
                if isinstance(type_, ReplyError) or isinstance(pttl, ReplyError):
                    add(
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
                    continue
            if pttl == -2 or type_ == b"none":
                add(k, "", None, None, 0, None, VANISHED, None, read_at)
                continue
            s = commands.get(type_)
            if s is None:  # module types: nothing generic reads them
                name = type_.decode()
                add(k, name, None, None, 0, None, ERROR, f"type {name} has no generic read", read_at)
                continue
            parts.append(s[0])
            parts.append(b)
            parts.append(s[1])
            self.value_keys.append(k)
            self.value_types.append(type_)
            self.ttls.append(pttl)
        self.payload = b"".join(parts)
        self.n_replies = len(self.value_keys)


class KeyReader:
    """Reads batches of keys of the currently selected database through one pipe."""

    def __init__(self, pipe: RespPipe, page: int, window_bytes: int) -> None:
        self.pipe = pipe
        self.page = page
        self.window_bytes = window_bytes
        self._commands = value_commands(page, window_bytes)

    def plan(self, keys: Sequence[bytes], bulks: Sequence[bytes], head: Sequence[Any], read_at: int) -> BatchPlan:
        return BatchPlan(keys, bulks, head, read_at, self._commands)

    def read(self, keys: Sequence[bytes]) -> list[KeyState]:
        """One batch, two round trips: the rows as KeyState objects (vanished keys included)."""
        return self.read_rows(keys).states()

    def read_rows(self, keys: Sequence[bytes]) -> Rows:
        if not keys:
            return Rows()
        bulks = [bulk(k) for k in keys]
        t0 = time.time()
        head = self.pipe.recv(self.pipe.send_packed(head_request(bulks), 2 * len(keys)))
        plan = self.plan(keys, bulks, head, int((t0 + time.time()) * 500))  # midpoint, in ms
        values = self.pipe.recv(self.pipe.send_packed(plan.payload, plan.n_replies))
        return self.finish(plan, values, self.pipe.call)

    def finish(self, plan: BatchPlan, values: Sequence[Any], call: Call) -> Rows:
        """Digest the value replies of `plan`; `call` reads the extra pages of keys longer than a page."""
        rows, read_at, window, page_size = plan.rows, plan.read_at, self.window_bytes, self.page
        add = rows.add
        s_keys: list[bytes] = []  # strings read whole: their rows are added column-wise below
        s_ttls: list[int | None] = []
        s_values: list[bytes] = []
        for k, type_, pttl, v in zip(plan.value_keys, plan.value_types, plan.ttls, values, strict=True):
            ttl = None if pttl < 0 else pttl
            if type_ == b"string":
                if v.__class__ is bytes and len(v) < window:
                    s_keys.append(k)
                    s_ttls.append(ttl)
                    s_values.append(v)
                else:
                    exp = None if ttl is None else read_at + ttl
                    add(k, "string", ttl, exp, *self._string(k, v, call), read_at)
                continue
            exp = None if ttl is None else read_at + ttl
            whole = _whole_first_page(type_, v, page_size)
            if whole is None:
                add(k, _TYPE_NAMES[type_], ttl, exp, *self._collection(k, type_, v, call), read_at)
            elif whole:
                n = len(whole) if type_ in _ONE_ITEM_PER_ELEMENT else len(whole) // 2
                add(k, _TYPE_NAMES[type_], ttl, exp, n, _ONE_PAGE[type_](whole), OK, None, read_at)
            elif type_ == b"stream":  # a stream may be empty (XDEL, XTRIM, XGROUP CREATE MKSTREAM)
                add(k, "stream", ttl, exp, *_empty_stream(k, call, OK), read_at)
            else:  # an empty page: the key went between TYPE and the read (no other collection is empty)
                add(k, "", None, None, 0, None, VANISHED, None, read_at)
        if s_keys:
            n = len(s_keys)
            rows.key += s_keys
            rows.type += ["string"] * n
            rows.ttl_ms += s_ttls
            rows.expire_at_ms += [None if t is None else read_at + t for t in s_ttls]
            rows.length += map(len, s_values)
            rows.digest += digest_strings(s_values)
            rows.status += [OK] * n
            rows.error += [None] * n
            rows.read_at_ms += [read_at] * n
        return rows

    def _string(self, key: bytes, first: Any, call: Call) -> tuple[int, str | None, str, str | None]:
        """A string at least one window long (or an error reply): STRLEN, then GETRANGE windows."""
        if isinstance(first, ReplyError):
            return 0, None, _failed(first), str(first)
        length = call((b"STRLEN", key))
        if isinstance(length, ReplyError):
            return 0, None, _failed(length), str(length)
        o = OrderedDigest("string")
        o.add_bytes(first)
        got = len(first)
        while got < length:
            chunk = call((b"GETRANGE", key, b"%d" % got, b"%d" % (got + self.window_bytes - 1)))
            if isinstance(chunk, ReplyError):
                return length, None, _failed(chunk), str(chunk)
            if not chunk:
                break
            o.add_bytes(chunk)
            got += len(chunk)
        return length, o.hexdigest(), OK if got == length else UNSTABLE, None

    def _collection(self, key: bytes, type_: bytes, first: Any, call: Call) -> tuple[int, str | None, str, str | None]:
        """(length, digest, status, error) of a collection longer than its `first` page (or an error reply)."""
        length = first if isinstance(first, ReplyError) else call((_LEN_CMD[type_], key))
        if isinstance(length, ReplyError):
            return 0, None, _failed(length), str(length)
        if length == 0:  # a full first page, then none: emptied (a stream) or gone meanwhile
            return _empty_stream(key, call, UNSTABLE) if type_ == b"stream" else (0, None, VANISHED, None)
        try:
            digest, complete = self._digest(key, type_, length, call)
        except ReplyError as e:
            return length, None, _failed(e), str(e)
        return length, digest, OK if complete else UNSTABLE, None

    def _digest(self, key: bytes, type_: bytes, length: int, call: Call) -> tuple[str, bool]:
        """Digest of the whole value read page by page from its start; False if it changed meanwhile."""

        def more(cmd: Command) -> Any:
            reply = call(cmd)
            if isinstance(reply, ReplyError):
                raise reply
            return reply

        count = b"%d" % self.page
        if type_ in _SCAN_CMD:
            u = UnorderedDigest(_TYPE_NAMES[type_])
            add = {b"hash": u.add_hash_page, b"set": u.add_set_page, b"zset": u.add_zset_page}[type_]
            scan_cmd = _SCAN_CMD[type_]
            cursor, items = more((scan_cmd, key, b"0", b"COUNT", count))
            add(items)
            while cursor != b"0":
                cursor, items = more((scan_cmd, key, cursor, b"COUNT", count))
                add(items)
            return u.hexdigest(), u.count == length
        o = OrderedDigest(_TYPE_NAMES[type_])
        if type_ == b"list":
            page = more((b"LRANGE", key, b"0", b"%d" % (self.page - 1)))
            o.add_elements(page)
            while len(page) == self.page and o.count < length:
                page = more((b"LRANGE", key, b"%d" % o.count, b"%d" % (o.count + self.page - 1)))
                o.add_elements(page)
            return o.hexdigest(), o.count == length
        page = more((b"XRANGE", key, b"-", b"+", b"COUNT", count))
        o.add_stream_entries(page)
        while len(page) == self.page and o.count < length:
            page = more((b"XRANGE", key, _next_stream_id(page[-1][0]), b"+", b"COUNT", count))
            o.add_stream_entries(page)
        return o.hexdigest(), o.count == length


def _failed(reply: ReplyError) -> str:
    """The status of a read a server refused: WRONGTYPE means the key was replaced by one of another
    type between two commands of its read (written meanwhile: unstable, re-read by the recheck), at
    whichever page it comes; any other refusal is an error (the key not compared)."""
    return UNSTABLE if str(reply).startswith("WRONGTYPE") else ERROR


def _whole_first_page(type_: bytes, page: Any, page_size: int) -> list[Any] | None:
    """The elements of a collection whose first page held all of it, or None (longer, or an error reply)."""
    if page.__class__ is not list:
        return None
    if type_ in _SCAN_CMD:
        return page[1] if page[0] == b"0" else None
    return page if len(page) < page_size else None


def _empty_stream(key: bytes, call: Call, status: str) -> tuple[int, str | None, str, str | None]:
    """(length, digest, status, error) of a stream XRANGE or XLEN found empty: XRANGE and XLEN answer
    a missing key the same way, so TYPE tells an empty stream (a key that exists, `status`) from a
    key that went between the reads (vanished) or came back as another type (unstable)."""
    type_ = call((b"TYPE", key))
    if isinstance(type_, ReplyError):
        return 0, None, ERROR, str(type_)
    if type_ == b"none":
        return 0, None, VANISHED, None
    if type_ != b"stream":
        return 0, None, UNSTABLE, None
    return 0, stream_hexdigest([]), status, None


def _next_stream_id(entry_id: bytes) -> bytes:
    """The smallest id after `entry_id`: XRANGE's exclusive '(' is 6.2+ only, and Pika lacks it."""
    ms, _, seq = entry_id.partition(b"-")
    return b"%d-%d" % (int(ms), int(seq or b"0") + 1)
