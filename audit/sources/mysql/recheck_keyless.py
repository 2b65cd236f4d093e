"""One recheck round over a keyless table's differing rows (rows.py runs the rounds).

A keyless table is compared as a multiset: a differing row is a row hash whose copies differ. Each
round counts the copies again on three snapshots, opened in this order: the master's (its GTID
position noted), the replica's once it has applied that position, and the master's again on a second
session, opened right after the replica's, so that it holds at least every row the replica does.
A surplus that is gone is converged; one whose master copies differ between the two master snapshots
is in flight; one the master held still is judged as a keyed row is (row_diff.judged): confirmed when
the master was written by no one between its snapshots, else once two rounds in a row find it.

The second snapshot is what tells a hot row from a divergence: a row set and set back between rounds,
'orig' in the first snapshot and 'tmp' in the replica's, is 'tmp' in the second one too, where reading
the master once, the same surplus in every round was a confirmed missing_row and extra_row of a
healthy pair. It is opened a moment after the first, not after the scans, so that a row written
in between and written back is rarely missed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from audit.sources.mysql.chunks import TableWork
from audit.sources.mysql.client import Server, connect
from audit.sources.mysql.row_diff import RowDiff, judged


@dataclass(frozen=True)
class _Reads:
    copies: dict[int, tuple[int, int]]
    """Row hash -> (master copies, replica copies) in the first two snapshots, where they differ."""
    after: dict[int, int]
    """Row hash -> master copies in the second master snapshot, for the hashes asked about."""
    reached: bool
    quiet: bool


def _hash(diff: RowDiff) -> int:
    value = diff.master_hash if diff.master_hash is not None else diff.replica_hash
    assert value is not None, "a keyless difference has its row hash"
    return value


def recheck_keyless(work: TableWork, diffs: list[RowDiff], first: bool) -> tuple[list[RowDiff], int]:
    """One round over one table's keyless rows: (what still differs, marked as rows.py reads it; converged)."""
    later = connect(work.sides.master.endpoint, "master", read_timeout_s=work.settings.read_timeout_s)
    try:
        reads = _read(work, later, {_hash(d) for d in diffs})
    finally:
        later.close()
    left: list[RowDiff] = []
    for d in diffs:
        m, r = reads.copies.get(_hash(d), (0, 0))
        surplus = m - r if d.master_hash is not None else r - m
        if surplus <= 0:
            continue
        moved = reads.after.get(_hash(d), 0) != m
        fresh = replace(d, copies=min(d.copies, surplus), in_flight=moved, suspect=False, behind=False)
        fresh = judged(d, fresh, quiet=reads.quiet, first=first)
        left.append(fresh if reads.reached else replace(fresh, behind=True))
    return left, len(diffs) - len(left)


def _read(work: TableWork, later: Server, wanted: set[int]) -> _Reads:
    reached, position = work.open_snapshots()
    try:
        later.begin()
        # without replication (a verification) the target holds what it holds, however the source moves
        quiet = not work.check_replication or later.gtid_position() == position
        copies = work.copies()
        after = _master_copies(work, later, wanted)
        # and after the scans: a MyISAM, Aria or MEMORY scan reads what is written while it runs (no
        # snapshot holds it), so a copy written mid-scan, not yet on the replica, was confirmed at once
        quiet = quiet and (not work.check_replication or later.gtid_position() == position)
    finally:
        work.close_snapshots()
        later.end()
    return _Reads(copies, after, reached is not False, quiet)


def _master_copies(work: TableWork, server: Server, wanted: set[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for batch in server.stream(work.sql["master"].hash_counts(), "counting the copies of each row"):
        for h, n in batch:
            if int(h or 0) in wanted:
                out[int(h or 0)] = int(n or 0)
    return out
