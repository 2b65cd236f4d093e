"""A table whose key sorts differently on each side, compared by key digests instead of key ranges.

A range `k >= 'a' AND k < 'm'` holds the rows its collation puts there. When a key column's collation
(or character set, or type) differs between master and replica (catalog.plan_table), the master's chunk
bounds cut the replica's rows elsewhere: a replica row fell into several chunks (its counts inflated,
its differences reported once per chunk). Reading the replica's ranges in the master's collation
(`k COLLATE utf8mb4_general_ci >= ...`) makes them right but leaves its index unused: every chunk scans
the replica's whole table (measured in docs/mysql.md). Such a table is walked as one chunk instead (the
whole table's digest, one scan per side) and, only when that differs, compared in two more scans per
side, whatever its size:

1. bucket digests: COUNT(*) and SUM(row hash) of the rows grouped by CRC32 of their key's text modulo
   B, about `fetch_rows` rows a bucket; the buckets whose digests differ hold every differing row;
2. the rows of those buckets, held (sql.held_expr), sorted by the MD5 of their key's text on both
   servers, streamed and merged: memory holds one batch per side, whatever the table's size.

When the two sides agree on no collation, rows are matched by their key's bytes: a utf8mb4_bin
replica's 'A' is not a utf8mb4_general_ci master's 'a' (one is missing, the other extra; the
`schema_mismatch` finding names both collations). When they do (a replica whose key leads with another
column), the key's text is its collation's weights (sql.TableSql.key_text), so the replica's 'A' is the
master's row 'a' spelt otherwise, as with key ranges. Rows are re-read by key as any others (rows.py,
repair.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from itertools import groupby
from typing import Protocol, TypeVar

from audit.sources.mysql.client import Row, Server
from audit.sources.mysql.endpoint import MySQLSettings
from audit.sources.mysql.row_diff import RowDiff, row_key
from audit.sources.mysql.sql import TableSql
from audit.sources.mysql.values import TablePlan

K = TypeVar("K", int, bytes)
T = TypeVar("T")
U = TypeVar("U")


class BothSides(Protocol):
    def both(self, on_master: Callable[[Server], T], on_replica: Callable[[Server], U]) -> tuple[T, U]: ...


class TableWork(Protocol):
    """What comparing by key digests needs of the walk over one table (chunks.TableWork, which calls
    :func:`compare`): a protocol, so that this module does not import the one that imports it."""

    @property
    def sides(self) -> BothSides: ...
    @property
    def plan(self) -> TablePlan: ...
    @property
    def index(self) -> int: ...
    @property
    def settings(self) -> MySQLSettings: ...
    @property
    def sql(self) -> Mapping[str, TableSql]: ...
    @property
    def collated(self) -> bool: ...
    def keys_per_fetch(self, reads: int) -> int: ...


LISTED_BUCKETS = 20_000
"""At most this many differing buckets are named in the rows' query (`IN (...)`); beyond, every row is
read (a statement of 20000 numbers is ~140 KB, well within max_allowed_packet)."""


def merge_runs(a: Iterator[Row], b: Iterator[Row], key: Callable[[Row], K]) -> Iterator[tuple[list[Row], list[Row]]]:
    """Two streams sorted by `key`, as pairs of runs of rows with one key value (either run may be empty)."""
    ga, gb = groupby(a, key), groupby(b, key)
    x, y = next(ga, None), next(gb, None)
    while x is not None or y is not None:
        if y is None or (x is not None and x[0] < y[0]):
            assert x is not None
            yield list(x[1]), []
            x = next(ga, None)
        elif x is None or y[0] < x[0]:
            yield [], list(y[1])
            y = next(gb, None)
        else:
            yield list(x[1]), list(y[1])
            x, y = next(ga, None), next(gb, None)


def compare(work: TableWork, rows: int) -> Iterator[RowDiff]:
    """The differing rows of a table whose whole digests differ (`rows`: the larger side's count)."""
    buckets = max(1, -(-rows // work.settings.fetch_rows))
    differing = differing_buckets(work, buckets)
    if differing:
        only = differing if len(differing) <= LISTED_BUCKETS and len(differing) < buckets else None
        yield from differing_rows(work, buckets, only)


def differing_buckets(work: TableWork, buckets: int) -> list[int]:
    doing = "reading the digests of key buckets"
    m, r = work.sides.both(
        lambda s: s.start_stream(work.sql["master"].bucket_digests(buckets), doing),
        lambda s: s.start_stream(work.sql["replica"].bucket_digests(buckets), doing),
    )
    return [_bucket(ms[0] if ms else rs[0]) for ms, rs in merge_runs(m, r, _bucket) if ms[:1] != rs[:1]]


def _bucket(row: Row) -> int:
    return int(row[0] or 0)


def _digest(row: Row) -> bytes:
    return bytes(row[-1] or b"")


def differing_rows(work: TableWork, buckets: int, only: list[int] | None) -> Iterator[RowDiff]:
    """The rows of buckets `only` (None: all) on both sides, merged by key digest: RowDiffs where they differ."""
    doing, batch = "reading the rows of differing key buckets", work.keys_per_fetch(2)
    m, r = work.sides.both(
        lambda s: s.start_stream(work.sql["master"].bucket_rows(buckets, only), doing, batch),
        lambda s: s.start_stream(work.sql["replica"].bucket_rows(buckets, only), doing, batch),
    )
    for ms, rs in merge_runs(m, r, _digest):
        # a run is one key, unless two keys' MD5s collide: matched by the key itself, or (`collated`:
        # the digest is of the key's weights, one row a side) spelt otherwise on the replica ('A' for 'a')
        mine = {row_key(work.plan, row): row for row in ms}
        theirs = {row_key(work.plan, row): row for row in rs}
        if work.collated and len(ms) == len(rs) == 1:
            theirs = {k: rs[0] for k in mine}
        for k in {**mine, **theirs}:
            a, b = mine.get(k), theirs.get(k)
            if a is not None and b is not None and (a[-2] == b[-2] or a[:-2] == b[:-2]):
                continue
            yield RowDiff(
                work.index,
                k,
                a[:-2] if a is not None else None,
                b[:-2] if b is not None else None,
                int(a[-2] or 0) if a is not None else None,
                int(b[-2] or 0) if b is not None else None,
            )
