"""The repair plan: SQL that would make the replica's rows equal to the master's. Written, never run.

As pt-table-sync --print and sync-diff-inspector's fix SQL: a row missing on the replica or different
there is `REPLACE INTO` with the master's values (as last re-read); a row only the replica has is
`DELETE ... WHERE <key> LIMIT 1`. A keyless table gets `INSERT`s for missing copies and
`DELETE ... WHERE <every column> <=> <value> LIMIT n` for surplus ones (text matched byte for byte:
`delete_copies`). A table's DELETEs come before
its REPLACEs and INSERTs: under a case-insensitive or PAD SPACE collation the replica's extra key `'A'`
or `'b '` equals the master's `'a'` or `'b'`, so a DELETE run after the REPLACE would remove the row
just written. Identifiers are backquoted,
values are literals that read the same under any sql_mode (sql.literal); TIMESTAMP values are UTC,
which the plan's own `SET time_zone` makes explicit.

Only the columns both sides have are written: a column only the replica has takes its default in a
REPLACEd row (the plan says so in its header when a table's definitions differ).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import TextIO

from audit.sources.mysql.chunks import RowDiff
from audit.sources.mysql.client import Row
from audit.sources.mysql.sql import decode_value, literal, quote_ident, table_ref
from audit.sources.mysql.values import Column, TablePlan

HEADER = """\
-- replica-audit repair plan{pair}: run on the REPLICA {replica}, never on the master.
-- replica-audit wrote it and did not execute it. Review it first: it makes the replica's rows equal to
-- the master's as they were re-read during the audit; rows written since may have moved on.
-- It repairs rows of tables both sides have: a table on one side only (missing_table, extra_table
-- findings) is not in it; create or drop that table first.
-- Writing on a replica creates errant GTIDs unless the session's binary log is off (needs the
-- privilege to set it):
-- SET SESSION sql_log_bin = 0;
SET NAMES utf8mb4;
SET SESSION time_zone = '+00:00';
SET SESSION foreign_key_checks = 0;
START TRANSACTION;
"""
FOOTER = "COMMIT;\n"


def _value(column: Column, raw: bytes | None, *, in_where: bool = False, mysql_json: bool = False) -> str:
    text = literal(decode_value(column, raw))
    if in_where and mysql_json and column.data_type == "json" and raw is not None:
        return f"CAST({text} AS JSON)"
    return text


def _columns(plan: TablePlan) -> str:
    return "(" + ", ".join(quote_ident(c.name) for c in plan.columns) + ")"


def _values(plan: TablePlan, row: Row) -> str:
    return "(" + ", ".join(_value(c, v) for c, v in zip(plan.columns, row, strict=True)) + ")"


def replace_row(plan: TablePlan, row: Row) -> str:
    return f"REPLACE INTO {table_ref(plan.schema, plan.name)} {_columns(plan)} VALUES {_values(plan, row)};"


def insert_row(plan: TablePlan, row: Row) -> str:
    return f"INSERT INTO {table_ref(plan.schema, plan.name)} {_columns(plan)} VALUES {_values(plan, row)};"


def delete_by_key(plan: TablePlan, row: Row) -> str:
    conds = " AND ".join(
        f"{quote_ident(plan.columns[i].name)} = {_value(plan.columns[i], row[i])}" for i in plan.key_positions
    )
    return f"DELETE FROM {table_ref(plan.schema, plan.name)} WHERE {conds} LIMIT 1;"


_PLAIN_TEXT = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext"})
EXACT_COLLATION = {False: "utf8mb4_nopad_bin", True: "utf8mb4_bin"}
"""By flavor (MySQL?): a collation that tells 'x' from 'X' (and, on MariaDB, 'x' from 'x '). MySQL's
utf8mb4_bin pads: on MySQL, copies differing only in trailing spaces still match each other's DELETE."""


def delete_copies(plan: TablePlan, row: Row, copies: int, *, mysql_json: bool = False) -> str:
    """Surplus copies of a keyless row. Its text is matched byte for byte: under the column's own
    collation ('x' = 'X' = 'x ') the DELETE could remove a copy of another row, one the master has too."""
    exact = f" COLLATE {EXACT_COLLATION[mysql_json]}"
    conds = " AND ".join(
        f"{quote_ident(c.name)} <=> {_value(c, v, in_where=True, mysql_json=mysql_json)}"
        + (exact if c.data_type in _PLAIN_TEXT and v is not None else "")
        for c, v in zip(plan.columns, row, strict=True)
    )
    return f"DELETE FROM {table_ref(plan.schema, plan.name)} WHERE {conds} LIMIT {copies};"


def statements(plan: TablePlan, diff: RowDiff, *, mysql_json: bool = False) -> list[str]:
    """The statements that repair one differing row (or one keyless surplus)."""
    if diff.key is None:
        if diff.master_row is not None:
            return [insert_row(plan, diff.master_row)] * diff.copies
        assert diff.replica_row is not None
        return [delete_copies(plan, diff.replica_row, diff.copies, mysql_json=mysql_json)]
    if diff.master_row is not None:
        return [replace_row(plan, diff.master_row)]
    assert diff.replica_row is not None
    return [delete_by_key(plan, diff.replica_row)]


class RepairPlan:
    """`with RepairPlan(path, replica_shown) as plan: plan.add(plan_, diffs)`: streamed, statement by statement."""

    def __init__(self, path: Path, replica: str, pair: str = "", *, mysql_json: bool = False) -> None:
        self.path, self.replica, self.pair, self.mysql_json = path, replica, pair, mysql_json
        self.statements = 0
        self._out: TextIO | None = None
        self._noted: set[str] = set()

    def __enter__(self) -> RepairPlan:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._out = self.path.open("w", encoding="utf-8")
        self._out.write(HEADER.format(pair=f" for pair {self.pair}" if self.pair else "", replica=self.replica))
        return self

    def note(self, text: str) -> None:
        if text not in self._noted and self._out is not None:
            self._noted.add(text)
            self._out.write("".join(f"-- {line}\n" for line in text.splitlines()))

    def add(self, plan: TablePlan, diffs: Iterable[RowDiff]) -> None:
        assert self._out is not None, "use RepairPlan as a context manager"
        for diff in sorted(diffs, key=lambda d: d.master_row is not None):  # removals first (module doc)
            for statement in statements(plan, diff, mysql_json=self.mysql_json):
                self._out.write(statement + "\n")
                self.statements += 1

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._out is not None:
            self._out.write(FOOTER)
            self._out.close()
            self._out = None
