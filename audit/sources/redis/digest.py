"""Value digests that depend on the logical value only, never on the server's internal encoding.

A listpack hash on the master and a hashtable hash on the replica hold the same value, so they must
digest equal; DUMP bytes and OBJECT ENCODING differ between them,
and DEBUG DIGEST-VALUE is disabled by default in 7.0 and absent in Pika. So each type is digested from
what the read commands return:

| type   | digest input                                                      | order  |
|--------|-------------------------------------------------------------------|--------|
| string | the bytes                                                         | stream |
| list   | each element, length-prefixed                                     | stream |
| stream | each entry id, then its field/value pairs, length-prefixed        | stream |
| hash   | sum mod 2**128 of H(value, seed=H(field))                         | none   |
| set    | sum mod 2**128 of H(member)                                       | none   |
| zset   | sum mod 2**128 of H(float64 score bytes, seed=H(member))          | none   |

A stream's consumer groups and last id are not part of its digest: XRANGE does not return them.

Unordered types fold element digests with an addition, so HSCAN/SSCAN/ZSCAN pages can be folded in
any order in constant memory; the element count goes into the final digest, and a caller that sees
more elements than the length command reported knows the scan returned duplicates (a rehash in
flight) and marks the key unstable instead of trusting the sum.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

import xxhash

_MASK128 = (1 << 128) - 1
_LEN = struct.Struct("<I")  # element length prefix for ordered types
_F64 = struct.Struct("<d")  # zset score, canonical binary form: "1", "1.0" and "1e0" read equal
_h64 = xxhash.xxh3_64_intdigest
_h128 = xxhash.xxh3_128_intdigest
_h128_hex = xxhash.xxh3_128_hexdigest


class OrderedDigest:
    """Incremental digest of a string, list or stream, fed page by page."""

    __slots__ = ("_h", "count")

    def __init__(self, type_name: str) -> None:
        self._h = xxhash.xxh3_128(type_name.encode())
        self.count = 0

    def add_bytes(self, chunk: bytes) -> None:
        self._h.update(chunk)

    def add_elements(self, elements: Sequence[bytes]) -> None:
        """List elements, each behind its u32 length: one hash update per page, no Python loop."""
        n = len(elements)
        if not n:
            return
        parts: list[bytes] = [b""] * (2 * n)
        parts[0::2] = list(map(_LEN.pack, map(len, elements)))
        parts[1::2] = elements
        self._h.update(b"".join(parts))
        self.count += n

    def add_stream_entries(self, entries: Sequence[Sequence[object]]) -> None:
        h = self._h
        for entry in entries:
            entry_id, fields = entry[0], entry[1]
            assert isinstance(entry_id, bytes) and isinstance(fields, list)
            h.update(_LEN.pack(len(entry_id)))
            h.update(entry_id)
            for f in fields:
                h.update(_LEN.pack(len(f)))
                h.update(f)
        self.count += len(entries)

    def hexdigest(self) -> str:
        return str(self._h.hexdigest())


class UnorderedDigest:
    """Order-independent digest of a hash, set or zset, folded page by page."""

    __slots__ = ("_sum", "_tag", "count")

    def __init__(self, type_name: str) -> None:
        self._tag = type_name.encode()
        self._sum = 0
        self.count = 0

    def add_hash_page(self, flat: Sequence[bytes]) -> None:
        """HSCAN/HGETALL reply: field, value, field, value, ... (C-level maps: no Python loop per field)."""
        self._sum = (self._sum + sum(map(_h128, flat[1::2], map(_h64, flat[0::2])))) & _MASK128
        self.count += len(flat) // 2

    def add_set_page(self, members: Sequence[bytes]) -> None:
        self._sum = (self._sum + sum(map(_h128, members))) & _MASK128
        self.count += len(members)

    def add_zset_page(self, flat: Sequence[bytes]) -> None:
        """ZSCAN / ZRANGE WITHSCORES reply: member, score, member, score, ..."""
        scores = map(_F64.pack, map(float, flat[1::2]))
        self._sum = (self._sum + sum(map(_h128, scores, map(_h64, flat[0::2])))) & _MASK128
        self.count += len(flat) // 2

    def hexdigest(self) -> str:
        return _unordered_hex(self._tag, self._sum, self.count)


def _unordered_hex(tag: bytes, total: int, count: int) -> str:
    # xxh3's hex digest is its 128-bit integer in 32 hex digits, without formatting a Python int (0.15-0.4 us
    # less per collection: bench/digest_bench.py)
    return str(_h128_hex(tag + (total & _MASK128).to_bytes(16, "little") + count.to_bytes(8, "little")))


# One-shot digests of a value read in one page: what the classes above give for a single page, without
# building a digest object per key (the snapshot's hot path).


def hash_hexdigest(flat: Sequence[bytes]) -> str:
    return _unordered_hex(b"hash", sum(map(_h128, flat[1::2], map(_h64, flat[0::2]))), len(flat) // 2)


def set_hexdigest(members: Sequence[bytes]) -> str:
    return _unordered_hex(b"set", sum(map(_h128, members)), len(members))


def zset_hexdigest(flat: Sequence[bytes]) -> str:
    scores = map(_F64.pack, map(float, flat[1::2]))
    return _unordered_hex(b"zset", sum(map(_h128, scores, map(_h64, flat[0::2]))), len(flat) // 2)


def list_hexdigest(elements: Sequence[bytes]) -> str:
    parts: list[bytes] = [b"list", *elements, *elements]
    parts[1::2] = list(map(_LEN.pack, map(len, elements)))
    parts[2::2] = elements
    return str(_h128_hex(b"".join(parts)))


def stream_hexdigest(entries: Sequence[Sequence[object]]) -> str:
    o = OrderedDigest("stream")
    o.add_stream_entries(entries)
    return o.hexdigest()


_STRING_TAG = b"string"


def digest_string(value: bytes) -> str:
    """OrderedDigest("string") fed `value` in one piece: xxh3 streamed or one-shot is the same hash."""
    return str(_h128_hex(_STRING_TAG + value))


def digest_strings(values: Iterable[bytes]) -> list[str]:
    """digest_string of each value, mapped in C."""
    return list(map(_h128_hex, map(_STRING_TAG.__add__, values)))
