"""Which fields, members or indexes of a diverged key differ: read both sides in pages, bounded memory.

For a hash, set or zset that still differs after the recheck, a 10M-field value must never be held in
memory, so the comparison works on digest buckets:

1. **Fold** (one HSCAN/SSCAN/ZSCAN pass per side): every element goes to bucket `h64(field) mod B`,
   whose sum of `h128(value, seed=h64(field))` and element count are kept: `B` numbers per side.
2. **Expand** only the buckets whose sums or counts differ: another pass per side keeps the elements
   of a group of differing buckets (at most `budget` elements per group, from the counts of step 1)
   and compares them field by field. A group per pass, at most `max_expand_passes` passes; if
   differing buckets remain after that, `total` is a lower bound and `exact` is False.

Memory: `2 * B` integers plus one group (bounded by `budget` elements, or by one bucket, about
length / B elements, when a single bucket is bigger than the budget).

A list is compared index by index over LRANGE windows taken at the same offsets on both sides; a
string over GETRANGE windows (the first differing byte offset). Values of up to 64 bytes are shown
quoted (redis-cli form) unless `show_values` is false; a set's or zset's member is a value too, and is
then named by its xxh3-64 only. Only the first `limit` differences are listed;
`total` counts them all. These reads happen after the recheck, on the keys that still differ; a key
written meanwhile may give an inexact answer (the finding's digests stay the evidence).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import xxhash
from hiredis import ReplyError

from audit.sources.redis.display import quote, short_value
from audit.sources.redis.resp import Command, RespPipe

_MASK128 = (1 << 128) - 1
_F64 = struct.Struct("<d")
_h64 = xxhash.xxh3_64_intdigest
_h128 = xxhash.xxh3_128_intdigest

DEFAULT_LIMIT = 100
DEFAULT_BUCKETS = 4096
DEFAULT_BUDGET = 200_000
_SCAN = {"hash": b"HSCAN", "set": b"SSCAN", "zset": b"ZSCAN"}


@dataclass
class FieldDiff:
    """The differences inside one key, as they go into a finding's `detail.fields`."""

    type: str
    total: int
    exact: bool = True
    items: list[dict[str, Any]] = field(default_factory=list)
    master_length: int | None = None
    replica_length: int | None = None
    passes: int = 0  # full scans of each side (a fold counts as one)
    buckets_differing: int = 0

    def as_evidence(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "total": self.total,
            "exact": self.exact,
            "shown": len(self.items),
            "items": self.items,
            "master_length": self.master_length,
            "replica_length": self.replica_length,
        }


def _one(pipe: RespPipe, cmd: Command) -> Any:
    reply = pipe.execute([cmd])[0]
    if isinstance(reply, ReplyError):
        raise reply
    return reply


def _elements(pipe: RespPipe, type_: str, key: bytes, page: int) -> Iterator[tuple[bytes, bytes, bytes]]:
    """(field, value digest input, value as shown) for every element, page by page (SCAN order)."""
    cursor = b"0"
    cmd = _SCAN[type_]
    count = b"%d" % page
    while True:
        cursor, flat = _one(pipe, (cmd, key, cursor, b"COUNT", count))
        if type_ == "set":
            for m in flat:
                yield m, b"", b""
        elif type_ == "zset":
            for i in range(0, len(flat), 2):
                yield flat[i], _F64.pack(float(flat[i + 1])), flat[i + 1]
        else:
            for i in range(0, len(flat), 2):
                yield flat[i], flat[i + 1], flat[i + 1]
        if cursor == b"0":
            return


def _fold(pipe: RespPipe, type_: str, key: bytes, page: int, buckets: int) -> tuple[list[int], list[int]]:
    sums, counts = [0] * buckets, [0] * buckets
    for f, v, _ in _elements(pipe, type_, key, page):
        h = _h64(f)
        b = h % buckets
        sums[b] += _h128(v, h)
        counts[b] += 1
    return [s & _MASK128 for s in sums], counts


def _collect(
    pipe: RespPipe, type_: str, key: bytes, page: int, buckets: int, wanted: set[int], show: bool
) -> dict[bytes, tuple[int, str | None]]:
    """field -> (value digest, value shown) for the elements of the wanted buckets only."""
    out: dict[bytes, tuple[int, str | None]] = {}
    for f, v, shown in _elements(pipe, type_, key, page):
        h = _h64(f)
        if h % buckets in wanted:
            out[f] = (_h128(v, h), short_value(shown, show=show) if type_ != "set" else None)
    return out


def _groups(differing: list[int], sizes: list[int], budget: int) -> list[set[int]]:
    groups: list[set[int]] = []
    current: set[int] = set()
    used = 0
    for b in differing:
        if current and used + sizes[b] > budget:
            groups.append(current)
            current, used = set(), 0
        current.add(b)
        used += sizes[b]
    if current:
        groups.append(current)
    return groups


def _element_name(element: bytes, type_: str, show: bool) -> dict[str, str]:
    """How an item names its element: a hash's field name (a name, like the key), or a set's or zset's
    member, which is the value itself: hidden behind its xxh3-64 (hex) when values are not shown, so
    an operator can still match it against a member they suspect (`xxh3_64(member)`)."""
    if type_ in ("set", "zset") and not show:
        return {"member_xxh3": f"{_h64(element):016x}"}
    shown = quote(element) if len(element) <= 256 else quote(element[:256]) + "..."
    return {"member" if type_ in ("set", "zset") else "field": shown}


def _compare_group(
    m: dict[bytes, tuple[int, str | None]], r: dict[bytes, tuple[int, str | None]], type_: str, show: bool
) -> list[dict[str, Any]]:
    out = []
    for f in sorted(m.keys() | r.keys()):
        mv, rv = m.get(f), r.get(f)
        if mv is not None and rv is not None and mv[0] == rv[0]:
            continue
        state = "missing_on_replica" if rv is None else "extra_on_replica" if mv is None else "differs"
        item: dict[str, Any] = {**_element_name(f, type_, show), "state": state}
        if type_ != "set":
            item["master"] = mv[1] if mv else None
            item["replica"] = rv[1] if rv else None
        out.append(item)
    return out


def unordered_diff(
    master: RespPipe,
    replica: RespPipe,
    key: bytes,
    type_: str,
    *,
    limit: int = DEFAULT_LIMIT,
    show_values: bool = True,
    page: int = 5000,
    buckets: int = DEFAULT_BUCKETS,
    budget: int = DEFAULT_BUDGET,
    max_expand_passes: int = 4,
) -> FieldDiff:
    """The differing fields (hash) or members (set, zset) of `key` (see the module docstring)."""
    m_sums, m_counts = _fold(master, type_, key, page, buckets)
    r_sums, r_counts = _fold(replica, type_, key, page, buckets)
    differing = [b for b in range(buckets) if m_sums[b] != r_sums[b] or m_counts[b] != r_counts[b]]
    result = FieldDiff(type_, 0, True, [], sum(m_counts), sum(r_counts), 1, len(differing))
    sizes = [m_counts[b] + r_counts[b] for b in range(buckets)]
    groups = _groups(differing, sizes, budget)
    for i, group in enumerate(groups):
        if i == max_expand_passes:
            # what is left is only known to differ: count at least the elements one side has more of
            rest = [b for g in groups[i:] for b in g]
            result.total += sum(max(abs(m_counts[b] - r_counts[b]), 1) for b in rest)
            result.exact = False
            break
        m = _collect(master, type_, key, page, buckets, group, show_values)
        r = _collect(replica, type_, key, page, buckets, group, show_values)
        result.passes += 1
        items = _compare_group(m, r, type_, show_values)
        result.total += len(items)
        result.items.extend(items[: max(0, limit - len(result.items))])
    return result


def list_diff(
    master: RespPipe,
    replica: RespPipe,
    key: bytes,
    *,
    limit: int = DEFAULT_LIMIT,
    show_values: bool = True,
    page: int = 1000,
) -> FieldDiff:
    """Indexes whose elements differ (an index only one side has counts too), window by window."""
    m_len, r_len = int(_one(master, (b"LLEN", key))), int(_one(replica, (b"LLEN", key)))
    result = FieldDiff("list", 0, True, [], m_len, r_len, 1)
    for start in range(0, max(m_len, r_len), page):
        window = (b"LRANGE", key, b"%d" % start, b"%d" % (start + page - 1))
        mw = _one(master, window) if start < m_len else []
        rw = _one(replica, window) if start < r_len else []
        for j in range(max(len(mw), len(rw))):
            mv = mw[j] if j < len(mw) else None
            rv = rw[j] if j < len(rw) else None
            if mv == rv:
                continue
            result.total += 1
            if len(result.items) < limit:
                result.items.append(
                    {
                        "index": start + j,
                        "state": "missing_on_replica"
                        if rv is None
                        else "extra_on_replica"
                        if mv is None
                        else "differs",
                        "master": short_value(mv, show=show_values),
                        "replica": short_value(rv, show=show_values),
                    }
                )
    return result


def string_diff(
    master: RespPipe, replica: RespPipe, key: bytes, *, show_values: bool = True, window: int = 1 << 20
) -> FieldDiff:
    """Where two strings start to differ; both values when short."""
    m_len, r_len = int(_one(master, (b"STRLEN", key))), int(_one(replica, (b"STRLEN", key)))
    result = FieldDiff("string", 0, True, [], m_len, r_len, 1)
    offset = 0
    first: int | None = None
    while offset < max(m_len, r_len) and first is None:
        cmd = (b"GETRANGE", key, b"%d" % offset, b"%d" % (offset + window - 1))
        mw, rw = _one(master, cmd), _one(replica, cmd)
        if mw != rw:
            first = offset + next(
                (i for i, (a, b) in enumerate(zip(mw, rw, strict=False)) if a != b), min(len(mw), len(rw))
            )
        offset += window
    if first is None and m_len == r_len:
        return result
    shown: dict[str, Any] = {"offset": first if first is not None else min(m_len, r_len), "state": "differs"}
    if max(m_len, r_len) <= 64 and show_values:
        shown["master"] = short_value(_one(master, (b"GET", key)), show=True)
        shown["replica"] = short_value(_one(replica, (b"GET", key)), show=True)
    result.total, result.items = 1, [shown]
    return result


def field_diff(
    master: RespPipe,
    replica: RespPipe,
    key: bytes,
    type_: str,
    *,
    limit: int = DEFAULT_LIMIT,
    show_values: bool = True,
    page: int = 5000,
    buckets: int = DEFAULT_BUCKETS,
    budget: int = DEFAULT_BUDGET,
) -> FieldDiff | None:
    """The field-level differences of a key of `type_` present on both sides (the pipes already SELECTed
    the key's db, and are connected to the nodes that hold it); None for a type compared as a whole
    (stream)."""
    if type_ in _SCAN:
        return unordered_diff(
            master, replica, key, type_, limit=limit, show_values=show_values, page=page, buckets=buckets, budget=budget
        )
    if type_ == "list":
        return list_diff(master, replica, key, limit=limit, show_values=show_values, page=page)
    if type_ == "string":
        return string_diff(master, replica, key, show_values=show_values)
    return None
