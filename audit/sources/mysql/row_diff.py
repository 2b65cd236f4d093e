"""A differing row as the MySQL walk reports it (:class:`RowDiff`), and a row's key decoded from its bytes.

Apart from chunks.py so that both ways of finding differing rows, key ranges (chunks.py) and key digests
(unordered.py), build on it without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from audit.sources.mysql.client import Row
from audit.sources.mysql.sql import KeyValue, decode_value
from audit.sources.mysql.values import TablePlan

Key = tuple[KeyValue, ...]


@dataclass(frozen=True)
class RowDiff:
    """A row whose two sides differ; `key` None for a keyless table, where `copies` is the surplus."""

    table: int
    key: Key | None
    master_row: Row | None
    replica_row: Row | None
    master_hash: int | None
    replica_hash: int | None
    copies: int = 1
    in_flight: bool = False
    """Set by the recheck: the master changed this row while it was re-read."""
    behind: bool = False
    """Set by the recheck: the replica had not applied the master's position when it was re-read."""
    suspect: bool = False
    """Set by the recheck: both master reads agreed, but the master was written between them (see judged)."""


def decode_key(plan: TablePlan, raw: Sequence[bytes | None]) -> Key:
    values = [decode_value(c, v) for c, v in zip(plan.key_columns, raw, strict=True)]
    assert all(v is not None for v in values), "key columns are NOT NULL"
    return tuple(v for v in values if v is not None)


def row_key(plan: TablePlan, row: Row) -> Key:
    return decode_key(plan, [row[i] for i in plan.key_positions])


def judged(previous: RowDiff, fresh: RowDiff, *, quiet: bool, first: bool) -> RowDiff:
    """`fresh`, a row that differed while both master reads agreed, as confirmed or `suspect`.

    Alike master reads show the row stood still only when the master was written by no one between
    them (`quiet`): else it may have changed and come back (set and set back, deleted and inserted
    again) while the replica, read in between, held the value it passed through. Such a row is
    confirmed once two rounds in a row find it with the same values on both sides (`previous`, the
    last round's verdict; none before the first round: the chunk compare is no round)."""
    if fresh.in_flight or quiet:
        return fresh
    again = not first and not previous.in_flight and not previous.behind
    if again and (previous.master_row, previous.replica_row) == (fresh.master_row, fresh.replica_row):
        return fresh
    return replace(fresh, suspect=True)
