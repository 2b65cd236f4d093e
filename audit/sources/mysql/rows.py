"""Differing rows: re-checked live in rounds, then turned into findings (check `rows`).

A row that differs once may only be in flight. Each round re-reads the remaining rows by key: on the
master (in a snapshot whose GTID position it notes), on the replica once it has applied that position,
then on the master again. A row equal on both sides is dropped (converged); a row the master changed
between its two reads is being written and cannot be judged this round (in flight); a row the master
read alike twice while the replica, at or past the master's first read, shows another value is a
divergence of the replica if the master was written by no one meanwhile, else a `suspect`, confirmed by
a second round in a row (row_diff.judged). A replica that has not applied the master's position within
`gtid_wait_s` (stopped, or too far behind) judges nothing: its differing rows are `behind`, and left
uncovered if they still are after the last round. Keyless tables are re-compared as multisets
(recheck_keyless.py).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from audit.findings import Finding
from audit.sources.mysql.chunks import Sides, TableWork
from audit.sources.mysql.client import Row, TableGone
from audit.sources.mysql.endpoint import MySQLSettings
from audit.sources.mysql.recheck_keyless import recheck_keyless
from audit.sources.mysql.row_diff import Key, RowDiff, judged
from audit.sources.mysql.sql import decode_value, held_digest, json_value
from audit.sources.mysql.values import Column, TablePlan

SHOWN_VALUE_CHARS = 200
"""Values longer than this are cut in a finding's detail (the repair plan has them whole); a value over
DIGESTED_BYTES is held and shown as its length and MD5 only."""


def category_of(diff: RowDiff) -> str:
    if diff.replica_row is None:
        return "missing_row"
    if diff.master_row is None:
        return "extra_row"
    return "row_mismatch"


def differing_columns(plan: TablePlan, diff: RowDiff) -> list[str]:
    if diff.master_row is None or diff.replica_row is None:
        return []
    return [c.name for c, a, b in zip(plan.columns, diff.master_row, diff.replica_row, strict=True) if a != b]


def key_json(plan: TablePlan, key: Key) -> bytes:
    """`[123457]`, `["A-17", 3]`: the key's values as a JSON array in UTF-8 (binary values as 0x<hex>)."""
    values = [json_value(c, v) for c, v in zip(plan.key_columns, key, strict=True)]
    return json.dumps(values, ensure_ascii=False, default=str).encode("utf-8")


def shown(column: Column, raw: bytes | None) -> object:
    digest = held_digest(column, raw)
    if digest is not None:  # a long value, held as its digest (sql.held_expr)
        return f"({digest[1]} bytes, md5 {digest[0]})"
    value = json_value(column, decode_value(column, raw))
    if isinstance(value, str) and len(value) > SHOWN_VALUE_CHARS:
        return value[:SHOWN_VALUE_CHARS] + f"... ({len(value)} characters)"
    return value


def _digest(value: int | None, hash_function: str) -> str | None:
    if value is None:
        return None
    return f"{value:016x}" if hash_function == "md5" else f"{value:08x}"


def to_finding(plan: TablePlan, diff: RowDiff, hash_function: str, **evidence: object) -> Finding:
    category = category_of(diff)
    detail: dict[str, object] = {"table": plan.display}
    if category == "row_mismatch":
        cols = differing_columns(plan, diff)
        by_name = {c.name: (i, c) for i, c in enumerate(plan.columns)}
        detail["columns"] = cols
        assert diff.master_row is not None and diff.replica_row is not None
        detail["values"] = {
            n: {
                "master": shown(by_name[n][1], diff.master_row[by_name[n][0]]),
                "replica": shown(by_name[n][1], diff.replica_row[by_name[n][0]]),
            }
            for n in cols
        }
    elif diff.key is None:
        row = diff.master_row if diff.master_row is not None else diff.replica_row
        if row is not None:
            detail["row"] = {c.name: shown(c, v) for c, v in zip(plan.columns, row, strict=True)}
    detail.update(evidence)
    return Finding(
        "rows",
        category,
        key=key_json(plan, diff.key) if diff.key is not None else None,
        count=diff.copies,
        master_digest=_digest(diff.master_hash, hash_function),
        replica_digest=_digest(diff.replica_hash, hash_function),
        evidence=detail,
    )


# --- recheck ----------------------------------------------------------------------------------------------


@dataclass
class RecheckResult:
    persisting: list[RowDiff] = field(default_factory=list)
    in_flight: list[RowDiff] = field(default_factory=list)
    behind: list[RowDiff] = field(default_factory=list)
    """Rows the replica, re-read before it had applied the master's position, could not judge."""
    altered: dict[int, str] = field(default_factory=dict)
    """Tables dropped or altered under the recheck (their rows are not judged), with the error."""
    converged: int = 0
    rounds_run: int = 0
    remaining_per_round: list[int] = field(default_factory=list)


Reads = dict[Key, tuple[Row, int]]


@dataclass(frozen=True)
class Round:
    """One round's reads of some keys: (master before, replica, master after), whether the replica had
    reached the master's position (noted with the first read) when read, and whether the master was
    written by no one between its two reads (its position the same after the second)."""

    before: Reads
    replica: Reads
    after: Reads
    reached: bool
    quiet: bool


def _read(work: TableWork, keys: Sequence[Key]) -> Round:
    sides = work.sides
    with sides.master.snapshot():
        position = sides.master.gtid_position() if work.check_replication else ""
        before = work.rows_by_key("master", keys)
    reached = sides.replica.wait_for(position, work.settings.gtid_wait_s) if work.check_replication else True
    replica = work.rows_by_key("replica", keys)
    after = work.rows_by_key("master", keys)
    # without replication (a verification) the target holds what it holds, however the source moves
    quiet = not work.check_replication or sides.master.gtid_position() == position
    return Round(before, replica, after, reached, quiet)


def _row(read: tuple[Row, int] | None) -> Row | None:
    return read[0] if read else None


def _hash(read: tuple[Row, int] | None) -> int | None:
    return read[1] if read else None


def _recheck_keyed(work: TableWork, diffs: list[RowDiff], result: RecheckResult, first: bool) -> list[RowDiff]:
    """One round over one table's keyed rows: what still differs (in flight and suspect ones included, marked)."""
    left: list[RowDiff] = []
    step = work.keys_per_fetch(3)  # master before, replica, master after: held at once
    for i in range(0, len(diffs), step):
        batch = diffs[i : i + step]
        read = _read(work, [d.key for d in batch if d.key is not None])
        for d in batch:
            assert d.key is not None
            fresh = reread(d, read.before.get(d.key), read.replica.get(d.key), read.after.get(d.key))
            if fresh is None:
                result.converged += 1
                continue
            fresh = judged(d, fresh, quiet=read.quiet, first=first)
            left.append(fresh if read.reached else replace(fresh, behind=True))
    return left


def reread(
    diff: RowDiff,
    master_before: tuple[Row, int] | None,
    replica: tuple[Row, int] | None,
    master_after: tuple[Row, int] | None,
) -> RowDiff | None:
    """A row's verdict from one recheck round: None when both sides agree now; else the row as now read,
    `in_flight` when the master changed it between its two reads (the replica read in between)."""
    m1, r, m2 = _row(master_before), _row(replica), _row(master_after)
    if m1 == r:
        return None
    return RowDiff(diff.table, diff.key, m1, r, _hash(master_before), _hash(replica), in_flight=m1 != m2)


def recheck(
    sides: Sides,
    plans: Sequence[TablePlan],
    diffs: list[RowDiff],
    settings: MySQLSettings,
    check_replication: bool,
) -> RecheckResult:
    """Re-read `diffs` for settings.recheck_rounds rounds; see the module doc."""
    result = RecheckResult()
    remaining = diffs
    for round_no in range(settings.recheck_rounds):
        if not remaining:
            break
        if round_no:
            time.sleep(settings.recheck_interval_s)
        by_table: dict[int, list[RowDiff]] = defaultdict(list)
        for d in remaining:
            by_table[d.table].append(d)
        remaining = []
        for table, table_diffs in sorted(by_table.items()):
            work = TableWork(sides, plans[table], table, settings, check_replication)
            keyed = [d for d in table_diffs if d.key is not None]
            keyless = [d for d in table_diffs if d.key is None]
            try:
                first = round_no == 0
                left = _recheck_keyed(work, keyed, result, first) if keyed else []
                if keyless:
                    kept, converged = recheck_keyless(work, keyless, first)
                    left += kept
                    result.converged += converged
            except TableGone as e:  # the other tables' rows are still judged
                result.altered[table] = str(e)
                continue
            remaining += left
        result.rounds_run += 1
        result.remaining_per_round.append(len(remaining))
    result.persisting = [d for d in remaining if not d.in_flight and not d.suspect and not d.behind]
    result.in_flight = [d for d in remaining if (d.in_flight or d.suspect) and not d.behind]
    result.behind = [d for d in remaining if d.behind]
    return result
