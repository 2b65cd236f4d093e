"""Value digests that depend on the logical value only, never on the server's internal encoding.

A listpack hash on the master and a hashtable hash on the replica hold the same value, so they must
digest equal; DUMP bytes and OBJECT ENCODING differ between them (reference/pika_redis.md §4.4, §4.6),
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


class OrderedDigest:
    """Incremental digest of a string, list or stream, fed page by page."""

    __slots__ = ("_h", "count")

    def __init__(self, type_name: str) -> None:
        self._h = xxhash.xxh3_128(type_name.encode())
        self.count = 0

    def add_bytes(self, chunk: bytes) -> None:
        self._h.update(chunk)

    def add_elements(self, elements: Iterable[bytes]) -> None:
        h = self._h
        n = 0
        for e in elements:
            h.update(_LEN.pack(len(e)))
            h.update(e)
            n += 1
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
        """HSCAN/HGETALL reply: field, value, field, value, ..."""
        s = self._sum
        for i in range(0, len(flat), 2):
            s += _h128(flat[i + 1], _h64(flat[i]))
        self._sum = s & _MASK128
        self.count += len(flat) // 2

    def add_set_page(self, members: Sequence[bytes]) -> None:
        s = self._sum
        for m in members:
            s += _h128(m)
        self._sum = s & _MASK128
        self.count += len(members)

    def add_zset_page(self, flat: Sequence[bytes]) -> None:
        """ZSCAN / ZRANGE WITHSCORES reply: member, score, member, score, ..."""
        s = self._sum
        for i in range(0, len(flat), 2):
            s += _h128(_F64.pack(float(flat[i + 1])), _h64(flat[i]))
        self._sum = s & _MASK128
        self.count += len(flat) // 2

    def hexdigest(self) -> str:
        return f"{_h128(self._tag + self._sum.to_bytes(16, 'little') + self.count.to_bytes(8, 'little')):032x}"


def digest_string(value: bytes) -> str:
    d = OrderedDigest("string")
    d.add_bytes(value)
    return d.hexdigest()
