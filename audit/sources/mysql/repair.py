"""The repair plan: SQL that would make the replica's rows equal to the master's. Written, never run.

As pt-table-sync --print: a row missing on the replica is `INSERT`ed with the master's values (as last
re-read), a row different there is `UPDATE`d by key in the columns that differ (and its TIMESTAMP and
DATETIME columns, which ON UPDATE CURRENT_TIMESTAMP would set to the repair's time), a row only the replica
has is `DELETE ... WHERE <key> LIMIT 1`. Never `REPLACE`: it deletes the replica's row and inserts
another, so a column only the replica has (added by a migration, not compared) went back to its
default and the table's DELETE triggers fired for a row nobody deleted. A keyless table gets `INSERT`s
for missing copies and `DELETE ... WHERE <every column> <=> <value> LIMIT n` for surplus ones (text
matched byte for byte: `delete_copies`).

A table's DELETEs come first, then its UPDATEs, then its INSERTs (`phase`): a DELETE or UPDATE may free
a unique value a later statement writes. When the key's collation differs between the sides, keys are
compared byte for byte (unordered.py), and under the replica's case-insensitive or PAD SPACE collation
its extra key `'A'` or `'b '` equals the master's missing `'a'` or `'b'`, so a DELETE run after the
INSERT would remove the row just written. Identifiers are backquoted, values are literals that read the
same under any sql_mode (sql.literal); TIMESTAMP values are UTC, which the plan's own `SET time_zone`
makes explicit. The plan's `foreign_key_checks = 0` lets a child row be written before its parent, and
stops InnoDB's cascades: a DELETE removes that row only, each table's rows repaired by its own findings.

Only the columns both sides have are written: a column only the replica has keeps its value in an
UPDATEd row and takes its default in an INSERTed one.

Rows are held with their long values as digests (sql.held_expr). A row whose written values (an
INSERT's, an UPDATE's changed columns) hold one is re-read whole on the master, one row at a time,
when it is written (`WholeRows`); if its row hash is no longer the one judged (written since), the plan
says so in a comment instead of writing a value nobody compared. A keyless surplus copy is deleted by
its digest: `MD5(col) = '..' AND LENGTH(col) = n`, byte exact like its other conditions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import TextIO

from audit.sources.mysql.client import Row, Server, connect
from audit.sources.mysql.endpoint import MySQLEndpoint, MySQLSettings
from audit.sources.mysql.row_diff import RowDiff
from audit.sources.mysql.sql import (
    BINARY_TYPES,
    DIGESTED_BYTES,
    LONG_TYPES,
    TableSql,
    binary_length,
    decode_value,
    held_digest,
    literal,
    quote_ident,
    table_ref,
)
from audit.sources.mysql.values import Column, TablePlan

HEADER = """\
-- replica-audit repair plan{pair}: run on the REPLICA {replica}, never on the master.
-- replica-audit wrote it and did not execute it. Review it first: it makes the replica's rows equal to
-- the master's as they were re-read during the audit; rows written since may have moved on.
-- It repairs rows of tables both sides have: a table on one side only (missing_table, extra_table
-- findings) is not in it; create or drop that table first. Changed rows are UPDATEd in the columns
-- that differ, missing ones INSERTed, extra ones DELETEd: columns the master lacks keep their values.
-- foreign_key_checks = 0 below: nothing cascades, a child table is repaired by its own statements.
-- Each statement fires the replica's triggers as any write would.
-- Writing on a replica creates errant GTIDs unless the session's binary log is off (needs the
-- privilege to set it):
-- SET SESSION sql_log_bin = 0;
SET NAMES utf8mb4;
SET SESSION time_zone = '+00:00';
SET SESSION foreign_key_checks = 0;
START TRANSACTION;
"""
FOOTER = "COMMIT;\n"
HEX_PIECE = 1 << 16


def _value(column: Column, raw: bytes | None, *, in_where: bool = False, mysql_json: bool = False) -> str:
    text = literal(decode_value(column, raw))
    if in_where and mysql_json and column.data_type == "json" and raw is not None:
        return f"CAST({text} AS JSON)"
    return text


def _columns(plan: TablePlan) -> str:
    return "(" + ", ".join(quote_ident(c.name) for c in plan.columns) + ")"


def _row_parts(plan: TablePlan, row: Row) -> Iterator[str]:
    """`INSERT INTO t (cols) VALUES (..);` in pieces, a value at a time: a row of 50 MB values is
    written without its whole statement text ever being built (the values' hex is twice their size)."""
    yield f"INSERT INTO {table_ref(plan.schema, plan.name)} {_columns(plan)} VALUES ("
    for i, (c, v) in enumerate(zip(plan.columns, row, strict=True)):
        yield ", " if i else ""
        yield from _literal_parts(c, v)
    yield ");"


def _update_parts(plan: TablePlan, row: Row, replica_row: Row, changed: Sequence[int]) -> Iterator[str]:
    """`UPDATE t SET <changed columns> WHERE <the replica's key> LIMIT 1;` in pieces (as _row_parts).
    The key's values are the replica's own: they match its row (one a latin1 side can spell, the 'A'
    its case-insensitive key holds for the master's 'a'), which SET may respell."""
    yield f"UPDATE {table_ref(plan.schema, plan.name)} SET "
    for n, i in enumerate(changed):
        yield (", " if n else "") + f"{quote_ident(plan.columns[i].name)} = "
        yield from _literal_parts(plan.columns[i], row[i])
    yield f" WHERE {_key_condition(plan, replica_row)} LIMIT 1;"


def _literal_parts(column: Column, raw: bytes | None) -> Iterator[str]:
    """A value the plan writes. A master BINARY(n)'s is compared without its 0x00 padding (sql.column_expr)
    against a VARBINARY: it is written as the n bytes the master holds, not as 'ab' for 'ab\\0\\0'."""
    n = binary_length(column)
    if raw is not None and n is not None and len(raw) < n:
        raw = raw + b"\0" * (n - len(raw))
    if raw is not None and len(raw) > DIGESTED_BYTES and column.data_type in LONG_TYPES:
        yield from _long_literal(column, raw)
    else:
        yield _value(column, raw)


def _long_literal(column: Column, raw: bytes) -> Iterator[str]:
    """A long value's literal in pieces: `X'..'` (`_utf8mb4 X'..'` for text, read in utf8mb4), as
    sql.literal writes it, without its whole hex text (twice the value) built at once."""
    yield "X'" if column.data_type in BINARY_TYPES else "_utf8mb4 X'"
    for i in range(0, len(raw), HEX_PIECE):
        yield raw[i : i + HEX_PIECE].hex().upper()
    yield "'"


def _key_condition(plan: TablePlan, row: Row) -> str:
    return " AND ".join(
        f"{quote_ident(plan.columns[i].name)} = {_value(plan.columns[i], row[i])}" for i in plan.key_positions
    )


def delete_by_key(plan: TablePlan, row: Row) -> str:
    return f"DELETE FROM {table_ref(plan.schema, plan.name)} WHERE {_key_condition(plan, row)} LIMIT 1;"


_PLAIN_TEXT = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext"})
EXACT_COLLATION = {False: "utf8mb4_nopad_bin", True: "utf8mb4_bin"}
"""By flavor (MySQL?): a collation that tells 'x' from 'X' (and, on MariaDB, 'x' from 'x '). MySQL's
utf8mb4_bin pads: on MySQL, copies differing only in trailing spaces still match each other's DELETE."""


def delete_copies(plan: TablePlan, row: Row, copies: int, *, mysql_json: bool = False) -> str:
    """Surplus copies of a keyless row. Its text is matched byte for byte: under the column's own
    collation ('x' = 'X' = 'x ') the DELETE could remove a copy of another row, one the master has too.
    Each value is matched as the replica's expression read it (sql.column_expr): a retyped column's
    value was read in the form both types share ('ab' for a BINARY(4)'s 'ab\\0\\0'), which the
    column itself never equals: the DELETE matched nothing, and the INSERT that followed doubled a row."""
    exact = f" COLLATE {EXACT_COLLATION[mysql_json]}"
    conds = " AND ".join(
        _digest_condition(expr, digest)
        if (digest := held_digest(c, v)) is not None
        else f"{expr} <=> {_value(c, v, in_where=True, mysql_json=mysql_json)}"
        + (exact if c.data_type in _PLAIN_TEXT and v is not None else "")
        for c, v, expr in zip(plan.columns, row, _replica_exprs(plan), strict=True)
    )
    return f"DELETE FROM {table_ref(plan.schema, plan.name)} WHERE {conds} LIMIT {copies};"


def _replica_exprs(plan: TablePlan) -> tuple[str, ...]:
    """The replica's column expressions; the bare columns for a plan built without them (unit tests)."""
    return plan.replica.exprs or tuple(quote_ident(c.name) for c in plan.columns)


def _digest_condition(expr: str, digest: tuple[str, int]) -> str:
    """A long value held as its digest, matched as the row hash read it (the replica's expression)."""
    return f"MD5({expr}) = '{digest[0]}' AND LENGTH({expr}) = {digest[1]}"


def holds_digest(plan: TablePlan, row: Row | None, positions: Sequence[int]) -> bool:
    return row is not None and any(held_digest(plan.columns[i], row[i]) is not None for i in positions)


def phase(diff: RowDiff) -> int:
    """When a diff's statement runs within the plan: 0 DELETE, 1 UPDATE, 2 INSERT (module doc)."""
    if diff.master_row is None:
        return 0
    return 1 if diff.key is not None and diff.replica_row is not None else 2


_AUTO_UPDATED = frozenset({"timestamp", "datetime", "date"})
"""Types a column ON UPDATE CURRENT_TIMESTAMP may have on the replica (a DATE there as the master's)."""


def written(plan: TablePlan, diff: RowDiff) -> list[int]:
    """The positions of the values a diff's statement writes: every column for an INSERT, none for a
    DELETE; for an UPDATE the columns that differ (held forms, compared as the audit did) and every
    TIMESTAMP or DATETIME: one ON UPDATE CURRENT_TIMESTAMP, unless written, takes the repair's time."""
    if diff.master_row is None:
        return []
    every = list(range(len(plan.columns)))
    if phase(diff) != 1:
        return every
    assert diff.replica_row is not None
    changed = [i for i in every if diff.master_row[i] != diff.replica_row[i]]
    if not changed:
        return every  # the row hashes differ: a value held alike still gets the master's
    return [i for i in every if i in changed or plan.columns[i].data_type in _AUTO_UPDATED]


WholeRow = Callable[[TablePlan, RowDiff], Row | None]
"""The master's row of a diff, whole; None when it changed (or went) since it was judged."""


class WholeRows:
    """Re-reads on the master the rows the plan writes whole, one at a time, on a session of its own
    opened at the first one (the audit's sessions are closed by then)."""

    def __init__(self, endpoint: MySQLEndpoint, settings: MySQLSettings) -> None:
        self.endpoint, self.settings = endpoint, settings
        self._server: Server | None = None
        self.reread = 0

    def __call__(self, plan: TablePlan, diff: RowDiff) -> Row | None:
        if self._server is None:
            self._server = connect(self.endpoint, "master", read_timeout_s=self.settings.read_timeout_s)
        sql = TableSql(plan, "master", self.settings.hash_function)
        if diff.key is not None:
            query = sql.rows_by_key([diff.key], whole=True)
        else:
            where = f"{sql.hash} = {diff.master_hash or 0}"  # a keyless row: any copy of it (a scan)
            query = f"SELECT {', '.join(sql.exprs)}, {sql.hash} FROM {sql.plain_source} WHERE {where} LIMIT 1"
        rows = self._server.query(query, "re-reading a long row for the repair plan")
        self.reread += 1
        if not rows or int(rows[0][-1] or 0) != diff.master_hash:
            return None
        return rows[0][:-1]

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None


def statement_parts(
    plan: TablePlan, diff: RowDiff, changed: Sequence[int], *, mysql_json: bool = False
) -> Iterator[Iterable[str]]:
    """The statements that repair one differing row (or one keyless surplus), each in pieces;
    `changed`: what `written` gave for the diff as judged (before a long value was re-read whole)."""
    if diff.master_row is None:
        assert diff.replica_row is not None
        if diff.key is None:
            yield [delete_copies(plan, diff.replica_row, diff.copies, mysql_json=mysql_json)]
        else:
            yield [delete_by_key(plan, diff.replica_row)]
    elif phase(diff) == 1:
        assert diff.replica_row is not None
        yield _update_parts(plan, diff.master_row, diff.replica_row, changed)
    else:
        for _ in range(diff.copies if diff.key is None else 1):
            yield _row_parts(plan, diff.master_row)


def statements(plan: TablePlan, diff: RowDiff, *, mysql_json: bool = False) -> list[str]:
    """The statements that repair one differing row (or one keyless surplus)."""
    changed = written(plan, diff)
    return ["".join(parts) for parts in statement_parts(plan, diff, changed, mysql_json=mysql_json)]


class RepairPlan:
    """`with RepairPlan(path, replica_shown) as plan: plan.add(plan_, diffs)`: streamed, statement by statement."""

    def __init__(
        self, path: Path, replica: str, pair: str = "", *, mysql_json: bool = False, whole: WholeRow | None = None
    ) -> None:
        self.path, self.replica, self.pair, self.mysql_json = path, replica, pair, mysql_json
        self.whole = whole
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
        for diff in sorted(diffs, key=phase):  # DELETE, UPDATE, INSERT (module doc)
            changed = written(plan, diff)
            if holds_digest(plan, diff.master_row, changed):
                whole = self.whole(plan, diff) if self.whole is not None else None
                if whole is None:
                    key = f" key {list(diff.key)}" if diff.key is not None else ""
                    self.note(f"{plan.display}{key}: changed on the master since it was compared; not written")
                    continue
                diff = replace(diff, master_row=whole)
            for parts in statement_parts(plan, diff, changed, mysql_json=self.mysql_json):
                for part in parts:
                    self._out.write(part)
                self._out.write("\n")
                self.statements += 1

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._out is not None:
            self._out.write(FOOTER)
            self._out.close()
            self._out = None
