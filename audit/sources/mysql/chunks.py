"""Chunk work on one open pair of sessions: checksum key ranges on both sides, narrow the ones that differ.

A segment (a key range of one table, one Spark task's share) is walked in chunks sized to a time
target, as pt-table-checksum does: the first chunk has `min_chunk_rows` rows, each next one as many as
the previous chunk's measured rate fills in `chunk_time_s` (within `max_chunk_rows`). A one-column
integer key is stepped by value (the rows per key unit learnt from the last chunk), the step cut by
the index walk below where that density is a guess (the first chunk, or after a sparse one); any other
key finds each chunk's upper bound with `ORDER BY key LIMIT 1 OFFSET n` on the master (an index walk,
cheaper than the hash). Bounds are the master's, applied to both sides, so rows only the replica
holds fall into some chunk too.

Each chunk: both sides open a consistent snapshot (the master notes its GTID position in it) and
compute COUNT(*) and SUM(row hash) at the same time. Equal chunks ship two numbers and are done. When
they differ (and check_replication), the replica first waits until it has applied the master's
position (bounded by `gtid_wait_s`), then reads its side again in a new snapshot, so lag alone never
makes a difference.
A differing chunk is narrowed inside the same two snapshots: the left half is checksummed on both
sides (the right half is the difference, sums being additive) and each half that differs is split
again, down to ranges of at most `fetch_rows` rows, whose keys and row hashes are fetched; only the
rows whose hashes differ are then fetched, held (long values as digests: sql.held_expr), in batches the
byte budget sizes (budget.py). A replica that had not reached the master's position makes a differing
chunk `uncovered`, never a finding.
Rows are matched by key as the key's collation compares it: under utf8mb4_general_ci the replica's 'A'
(or 'a ') is the master's row 'a', its key column spelt differently (a row_mismatch), as the
replica's unique key and every statement by key take it. A table whose key sorts differently on each
side (another collation) is walked as one chunk and compared by key digests instead (unordered.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from audit.pacing import Pacer, PaceSettings
from audit.sources.mysql.budget import held_row_bytes, keys_per_fetch
from audit.sources.mysql.client import Row, Server, TableGone
from audit.sources.mysql.endpoint import MySQLSettings
from audit.sources.mysql.row_diff import Key, RowDiff, decode_key, row_key
from audit.sources.mysql.sql import INT_TYPES, TEXT_TYPES, Bound, TableSql
from audit.sources.mysql.unordered import compare
from audit.sources.mysql.values import SIDES, Side, TablePlan

T = TypeVar("T")
U = TypeVar("U")


@dataclass(frozen=True)
class Digest:
    """COUNT(*) and SUM(row hash) of a range: additive, so a half is the whole minus the other half."""

    count: int
    total: int

    def __sub__(self, other: Digest) -> Digest:
        return Digest(self.count - other.count, self.total - other.total)

    def __add__(self, other: Digest) -> Digest:
        return Digest(self.count + other.count, self.total + other.total)


ZERO = Digest(0, 0)
BEHIND = "the replica had not applied the master's GTID position"
"""How an uncovered range or row behind the replica's apply starts (the engine adds MASTER_DELAY to it)."""


@dataclass(frozen=True)
class Segment:
    table: int
    lower: Bound
    upper: Bound
    int_span: tuple[int, int] | None = None
    """(lowest, highest) key value over both sides, when the key is one integer column."""
    density: float = 1.0
    """Estimated rows per key unit (integer keys): the first chunk's step."""


# --- events a task reports -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChunkDone:
    table: int
    lower: Bound
    upper: Bound
    master: Digest
    replica: Digest
    status: str
    """equal, different, or uncovered (the replica had not reached the master's position)."""
    seconds: float


@dataclass(frozen=True)
class Uncovered:
    table: int
    lower: Bound
    upper: Bound
    reason: str
    rows: int = 0


Event = ChunkDone | RowDiff | Uncovered


# --- the two sessions -------------------------------------------------------------------------------------


class Sides:
    """A task's sessions on both servers; `both()` runs the replica's part in a thread beside the master's."""

    def __init__(self, master: Server, replica: Server) -> None:
        self.master, self.replica = master, replica
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="replica")

    def both(self, on_master: Callable[[Server], T], on_replica: Callable[[Server], U]) -> tuple[T, U]:
        future = self._pool.submit(on_replica, self.replica)
        try:
            a = on_master(self.master)
        finally:
            b = future.result()  # never leave the replica's session busy, even when the master failed
        return a, b

    def server(self, side: Side) -> Server:
        return self.master if side == "master" else self.replica

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.master.close()
        self.replica.close()


def merge_counts(a: Iterator[Row], b: Iterator[Row]) -> Iterator[tuple[int, int, int]]:
    """(hash, count in a, count in b) over two streams of (hash, count) sorted by hash."""
    x, y = next(a, None), next(b, None)
    while x is not None or y is not None:
        hx = int(x[0] or 0) if x is not None else None
        hy = int(y[0] or 0) if y is not None else None
        if hy is None or (hx is not None and hx < hy):
            assert x is not None and hx is not None
            yield hx, int(x[1] or 0), 0
            x = next(a, None)
        elif hx is None or hy < hx:
            assert y is not None
            yield hy, 0, int(y[1] or 0)
            y = next(b, None)
        else:
            assert x is not None and y is not None
            yield hx, int(x[1] or 0), int(y[1] or 0)
            x, y = next(a, None), next(b, None)


def _digest(row: Row | None) -> Digest:
    if row is None:
        return ZERO
    return Digest(int(row[0] or 0), int(row[1] or 0))


# --- one table's chunk work -------------------------------------------------------------------------------


class TableWork:
    def __init__(
        self, sides: Sides, plan: TablePlan, index: int, settings: MySQLSettings, check_replication: bool
    ) -> None:
        self.sides, self.plan, self.index = sides, plan, index
        self.settings, self.check_replication = settings, check_replication
        self.sql = {s: TableSql(plan, s, settings.hash_function) for s in ("master", "replica")}
        self.pacer = Pacer(PaceSettings(max_keys_per_s=settings.max_rows_per_s)) if settings.max_rows_per_s else None
        self._waited = 0.0
        self.row_bytes = held_row_bytes(plan)
        # a row read by a text key may be spelt otherwise ('A' read for 'a'): matched to the key asked for
        # by the server's own equality; when the sides' collations differ, only bytes match
        self.collated = plan.collated and any(c.data_type in TEXT_TYPES for c in plan.key_columns)

    def keys_per_fetch(self, reads: int) -> int:
        """Keys per fetch, `reads` fetches held at once, within settings.max_fetch_bytes (budget.py)."""
        return keys_per_fetch(self.row_bytes, self.settings.max_fetch_bytes, reads)

    def checksums(self, lower: Bound, upper: Bound) -> tuple[Digest, Digest]:
        m_sql, r_sql = self.sql["master"].checksum(lower, upper), self.sql["replica"].checksum(lower, upper)
        m, r = self.sides.both(lambda s: s.one(m_sql, "a chunk checksum"), lambda s: s.one(r_sql, "a chunk checksum"))
        return _digest(m), _digest(r)

    def open_snapshots(self) -> tuple[bool | None, str]:
        """Both snapshots, the replica's once it has applied the master's position: (reached or not
        (None without check_replication), that position)."""
        position = ""
        self.sides.master.begin()
        if self.check_replication:
            position = self.sides.master.gtid_position()
        wait_s = self.settings.gtid_wait_s

        def replica(s: Server) -> bool | None:
            reached = s.wait_for(position, wait_s) if self.check_replication else None
            s.begin()
            return reached

        try:
            return self.sides.both(lambda s: None, replica)[1], position
        except BaseException:
            self.sides.master.end()
            raise

    def close_snapshots(self) -> None:
        self.sides.both(lambda s: s.end(), lambda s: s.end())

    def _open_and_checksum(self, lower: Bound, upper: Bound) -> tuple[Digest, Digest, bool | None]:
        """New snapshots and the chunk's digests, both sides at once; (master, replica, reached).

        Equal digests need no waiting: equal is equal. Only when they differ (and check_replication)
        does the replica wait until it has applied the master's position, noted in the master's
        snapshot, and read its side again: lag then makes no difference. Each START TRANSACTION also
        ends the previous chunk's snapshot, which saves a COMMIT round trip per side and chunk.
        """
        m_sql, r_sql = self.sql["master"].checksum(lower, upper), self.sql["replica"].checksum(lower, upper)
        self.sides.master.begin()
        position = self.sides.master.gtid_position() if self.check_replication else ""

        def replica(s: Server) -> Digest:
            s.begin()
            return _digest(s.one(r_sql, "a chunk checksum"))

        m, r = self.sides.both(lambda s: _digest(s.one(m_sql, "a chunk checksum")), replica)
        if m == r or not self.check_replication:
            return m, r, None
        reached = self._wait(position)
        return m, replica(self.sides.replica), reached

    def _wait(self, position: str) -> bool:
        """The replica's bounded wait (shorter after one that timed out: Server.wait_for), timed apart."""
        t0 = time.perf_counter()
        reached = self.sides.replica.wait_for(position, self.settings.gtid_wait_s)
        self._waited += time.perf_counter() - t0
        return reached

    def chunk(self, lower: Bound, upper: Bound) -> Iterator[Event]:
        """One chunk's events; its snapshots stay open until the next chunk (or close_snapshots)."""
        t0, self._waited = time.perf_counter(), 0.0
        try:
            m, r, reached = self._open_and_checksum(lower, upper)
            # the checksums' time, which sizes the next chunk: not the wait for a lagging replica, which
            # shrank every chunk to min_chunk_rows, each then waiting again (a second each once behind)
            seconds = time.perf_counter() - t0 - self._waited
            if m == r or reached is False:
                yield from self._settled(lower, upper, m, r, seconds)
            else:
                yield from self._explained(lower, upper, m, r, seconds)
        except BaseException:
            self.close_snapshots()
            raise
        if self.pacer is not None:
            self.pacer.before_batch(max(m.count, r.count))

    def _explained(self, lower: Bound, upper: Bound, m: Digest, r: Digest, seconds: float) -> Iterator[Event]:
        """The differing rows of a chunk whose digests differ, then its ChunkDone: `different`, or
        `uncovered` when no row was found to differ. In one pair of snapshots that is no convergence
        but a lookup that missed (a key read back on neither side, as MariaDB's row IN did for latin1
        'é'): it was taken for equal rows, a silent miss; it is now uncovered, which the gate sees.
        A table whose engine reads no snapshot (MyISAM, Aria, MEMORY) is read as it is written, its
        digests and rows at different moments: such a chunk is read again, in new snapshots at a new
        position, up to `recheck_rounds` times (a healthy copy written during the audit was uncovered)."""
        for attempt in range(self.settings.recheck_rounds + 1):
            if attempt:
                m, r, reached = self._open_and_checksum(lower, upper)
                if m == r or reached is False:
                    yield from self._settled(lower, upper, m, r, seconds)
                    return
            found = 0
            for diff in self._differing_rows(lower, upper, m, r):
                found += 1
                yield diff
            if found:
                yield ChunkDone(self.index, lower, upper, m, r, "different", seconds)
                return
        yield ChunkDone(self.index, lower, upper, m, r, "uncovered", seconds)
        reads = self.settings.recheck_rounds + 1
        reason = f"its digests differ, but no row read by key differed on the two sides (in {reads} reads)"
        yield Uncovered(self.index, lower, upper, reason, max(m.count, r.count))

    def _settled(self, lower: Bound, upper: Bound, m: Digest, r: Digest, seconds: float) -> Iterator[Event]:
        """A chunk read equal, or uncovered: the replica had not reached the master's position."""
        if m == r:
            yield ChunkDone(self.index, lower, upper, m, r, "equal", seconds)
            return
        yield ChunkDone(self.index, lower, upper, m, r, "uncovered", seconds)
        yield Uncovered(
            self.index, lower, upper, f"{BEHIND} within {self.settings.gtid_wait_s}s", max(m.count, r.count)
        )

    def _differing_rows(self, lower: Bound, upper: Bound, m: Digest, r: Digest) -> Iterator[RowDiff]:
        if not self.plan.key:
            return self.multiset()
        if not self.plan.ranges:
            return compare(self, max(m.count, r.count))
        return self.narrow(lower, upper, m, r)

    # --- narrowing ---------------------------------------------------------------------------------------
    def narrow(self, lower: Bound, upper: Bound, m: Digest, r: Digest) -> Iterator[RowDiff]:
        todo = [(lower, upper, m, r)]
        while todo:
            lo, hi, a, b = todo.pop()
            rows = max(a.count, b.count)
            dense = abs(a.count - b.count) > self.settings.fetch_rows
            mid = None if rows <= self.settings.fetch_rows or dense else self._middle(lo, hi, a, b)
            if mid is None:
                yield from self.compare_rows(lo, hi)
                continue
            la, lb = self.checksums(lo, mid)
            for part in ((mid, hi, a - la, b - lb), (lo, mid, la, lb)):
                if part[2] != part[3]:
                    todo.append(part)

    def _middle(self, lower: Bound, upper: Bound, a: Digest, b: Digest) -> Bound:
        """A key splitting the range in two halves of rows (None when it cannot be split)."""
        if self._int_key() and lower is not None and upper is not None:
            lo, hi = int(lower[0]), int(upper[0])
            return (lo + (hi - lo) // 2,) if hi - lo > 1 else None
        side: Side = "master" if a.count >= b.count else "replica"
        sql = self.sql[side].boundary(lower, upper, max(a.count, b.count) // 2)
        row = self.sides.server(side).one(sql, "splitting a differing chunk")
        if row is None:
            return None
        mid = decode_key(self.plan, row)
        return None if mid == lower else mid

    def _int_key(self) -> bool:
        return len(self.plan.key) == 1 and self.plan.key_columns[0].data_type in INT_TYPES

    def _hashes(self, side: Side, lower: Bound, upper: Bound) -> dict[Key, int]:
        sql = self.sql[side].key_hashes(lower, upper)
        n = len(self.plan.key)
        out = {}
        for batch in self.sides.server(side).stream(sql, "reading the row hashes of a differing range"):
            for row in batch:
                out[decode_key(self.plan, row[:n])] = int(row[n] or 0)
        return out

    def rows_by_key(self, side: Side, keys: Sequence[Key], _: Server | None = None) -> dict[Key, tuple[Row, int]]:
        """The rows of `keys` on one side, by the key each matched: its own, or (`collated`) one it equals
        under the key's collation, told by the server in a second read of the keys left unmatched (the
        replica's 'A' for the master's 'a': the same row there, and also read for 'A' when asked)."""
        server, doing = self.sides.server(side), "reading differing rows"
        rows = server.query(self.sql[side].rows_by_key(keys), doing)
        out = {row_key(self.plan, r[:-1]): (r[:-1], int(r[-1] or 0)) for r in rows}
        if not self.collated:
            return out
        matched = {k: out[k] for k in keys if k in out}
        unmatched = [k for k in keys if k not in out]  # missing here, or spelt otherwise
        for r in server.query(self.sql[side].rows_by_key(unmatched, tagged=True), doing) if unmatched else ():
            matched[unmatched[int(r[-1] or 0)]] = (r[:-2], int(r[-2] or 0))
        return matched

    def compare_rows(self, lower: Bound, upper: Bound) -> Iterator[RowDiff]:
        mh, rh = self.sides.both(
            lambda s: self._hashes("master", lower, upper), lambda s: self._hashes("replica", lower, upper)
        )
        differ = [k for k in {**mh, **rh} if mh.get(k) != rh.get(k)]
        yield from self.fetch_rows(differ)

    def fetch_rows(self, keys: Sequence[Key]) -> Iterator[RowDiff]:
        """The rows of `keys` on both sides (in the current snapshots), as RowDiffs when they differ.

        Each row once: under the key's collation the master's 'a' and the replica's 'A' are both
        differing keys of a range, and whichever comes first (the master's) was matched to both rows."""
        step = self.keys_per_fetch(2)
        seen: set[tuple[Side, Key]] = set()
        for i in range(0, len(keys), step):
            batch = keys[i : i + step]
            m, r = self.sides.both(
                partial(self.rows_by_key, "master", batch), partial(self.rows_by_key, "replica", batch)
            )
            for k in batch:
                mrow, rrow = m.get(k), r.get(k)
                if (mrow is None and rrow is None) or (mrow and rrow and mrow[0] == rrow[0]):
                    continue  # equal now: possible only when read outside one snapshot
                rows = {(s, row_key(self.plan, read[0])) for s, read in zip(SIDES, (mrow, rrow), strict=True) if read}
                if rows & seen:
                    continue
                seen |= rows
                yield RowDiff(
                    self.index,
                    k,
                    mrow[0] if mrow else None,
                    rrow[0] if rrow else None,
                    mrow[1] if mrow else None,
                    rrow[1] if rrow else None,
                )

    # --- keyless tables ----------------------------------------------------------------------------------
    def copies(self) -> dict[int, tuple[int, int]]:
        """Row hash -> (master copies, replica copies), where they differ: both sides' counts come
        sorted by hash and are merged as they stream, so memory holds the differences only."""
        doing = "counting the copies of each row"
        m_rows, r_rows = self.sides.both(
            lambda s: s.start_stream(self.sql["master"].hash_counts(), doing),
            lambda s: s.start_stream(self.sql["replica"].hash_counts(), doing),
        )
        return {h: (m, r) for h, m, r in merge_counts(m_rows, r_rows) if m != r}

    def _samples(self, side: Side, wanted: set[int]) -> dict[int, Row]:
        out: dict[int, Row] = {}
        sql, doing = self.sql[side].all_rows(), "reading differing keyless rows"
        for batch in self.sides.server(side).stream(sql, doing, self.keys_per_fetch(2)):
            for row in batch:
                h = int(row[-1] or 0)
                if h in wanted and h not in out:
                    out[h] = row[:-1]
        return out

    def multiset(self) -> Iterator[RowDiff]:
        """A keyless table as a multiset: rows whose number of copies differs, with the surplus."""
        surplus = {h: m - r for h, (m, r) in self.copies().items()}
        if not surplus:
            return
        ms, rs = self.sides.both(
            lambda s: self._samples("master", {h for h, n in surplus.items() if n > 0}),
            lambda s: self._samples("replica", {h for h, n in surplus.items() if n < 0}),
        )
        for h, n in sorted(surplus.items()):
            if n > 0:
                yield RowDiff(self.index, None, ms.get(h), None, h, None, copies=n)
            else:
                yield RowDiff(self.index, None, None, rs.get(h), None, h, copies=-n)

    # --- walking a segment -------------------------------------------------------------------------------
    def walk(self, segment: Segment) -> Iterator[Event]:
        """Every chunk of `segment`; a table altered under us ends the walk with an Uncovered event."""
        lower = segment.lower
        try:
            if not self.plan.key or not self.plan.ranges:
                yield from self.chunk(None, None)
                return
            target = float(self.settings.min_chunk_rows)
            density = segment.density
            guessed = True  # the segment's density is the whole table's average
            while True:
                upper, cut = self._next_upper(segment, lower, target, density, guessed)
                rows, seconds = 0, 0.0
                for event in self.chunk(lower, upper):
                    if isinstance(event, ChunkDone):
                        rows, seconds = max(event.master.count, event.replica.count), event.seconds
                    yield event
                # what the next step's density is learnt from is trusted only from a chunk its own step
                # filled: one well short of its target (a sparse stretch) or cut short (a sparse stretch
                # and a dense run averaged) tells nothing of the keys past it
                guessed = cut or rows < target / 2
                start = lower if lower is not None or segment.int_span is None else (segment.int_span[0],)
                target, density = self._adapt(target, density, rows, seconds, start, upper)
                if upper == segment.upper:
                    return
                lower = upper
        except TableGone as e:
            yield Uncovered(self.index, lower, segment.upper, f"altered during the audit: {e}")
        finally:
            self.close_snapshots()

    def _next_upper(
        self, segment: Segment, lower: Bound, target: float, density: float, guessed: bool
    ) -> tuple[Bound, bool]:
        """The next chunk's upper bound, about `target` rows past `lower` on the master; and whether
        the index walk cut an integer step short.

        An integer key is stepped by value. Where the density is a guess (the table's average, or a
        sparse stretch's), a dense run of keys past it would fall whole into one chunk (ids 1-6000, then
        1,000,000 on: one chunk of all the low ids, whatever max_chunk_rows says); the step is then cut
        at the key `target` rows on, as any other key's bound is found."""
        if segment.int_span is None:
            return self._boundary(lower, segment.upper, target), False
        start = int(lower[0]) if lower is not None else segment.int_span[0]
        # density halves with each empty chunk, the step doubling: a fixed floor (1e-12) capped
        # it, and an empty 2^64 span took 2^64 / (max_chunk_rows / 1e-12) chunks (46000 at 400)
        lowest, highest = segment.int_span
        step = max(1, int(target / max(density, 1 / (highest - lowest + 1))))
        nxt = start + step
        upper: Bound = (nxt,)
        if segment.upper is not None and nxt >= int(segment.upper[0]):
            upper = segment.upper
        elif segment.upper is None and nxt > highest:
            upper = None
        if not guessed:
            return upper, False
        cut = self._boundary(lower, upper, target)
        return cut, cut != upper

    def _boundary(self, lower: Bound, upper: Bound, target: float) -> Bound:
        """The master's key `target` rows past `lower`, or `upper` if fewer rows lie before it."""
        sql = self.sql["master"].boundary(lower, upper, max(1, int(target)))
        row = self.sides.master.one(sql, "finding a chunk boundary")
        return decode_key(self.plan, row) if row is not None else upper

    def _adapt(
        self, target: float, density: float, rows: int, seconds: float, lower: Bound, upper: Bound
    ) -> tuple[float, float]:
        """Next chunk's row target from this chunk's rate; integer keys also learn rows per key unit."""
        s = self.settings
        new_target = rows / seconds * s.chunk_time_s if rows and seconds > 0 else target * 2
        new_target = min(float(s.max_chunk_rows), max(float(s.min_chunk_rows), new_target))
        if lower is not None and upper is not None and self._int_key():
            span = int(upper[0]) - int(lower[0])
            density = rows / span if rows and span > 0 else density / 2
        return new_target, density
