"""A differing row as the MySQL walk reports it (:class:`RowDiff`), and a row's key decoded from its bytes.

Apart from chunks.py so that both ways of finding differing rows, key ranges (chunks.py) and key digests
(unordered.py), build on it without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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


def decode_key(plan: TablePlan, raw: Sequence[bytes | None]) -> Key:
    values = [decode_value(c, v) for c, v in zip(plan.key_columns, raw, strict=True)]
    assert all(v is not None for v in values), "key columns are NOT NULL"
    return tuple(v for v in values if v is not None)


def row_key(plan: TablePlan, row: Row) -> Key:
    return decode_key(plan, [row[i] for i in plan.key_positions])
