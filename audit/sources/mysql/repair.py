"""The repair plan: SQL that would make the replica's rows equal to the master's. Written, never run.

As pt-table-sync --print and sync-diff-inspector's fix SQL: a row missing on the replica or different
there is `REPLACE INTO` with the master's values (as last re-read); a row only the replica has is
`DELETE ... WHERE <key> LIMIT 1`. A keyless table gets `INSERT`s for missing copies and
`DELETE ... WHERE <every column> <=> <value> LIMIT n` for surplus ones (text matched byte for byte:
`delete_copies`). A table's DELETEs come before
its REPLACEs and INSERTs: when the key's collation differs between the sides, keys are compared byte
for byte (unordered.py), and under the replica's case-insensitive or PAD SPACE collation its extra key
`'A'` or `'b '` equals the master's missing `'a'` or `'b'`, so a DELETE run after the REPLACE would
remove the row just written. Identifiers are backquoted,
values are literals that read the same under any sql_mode (sql.literal); TIMESTAMP values are UTC,
which the plan's own `SET time_zone` makes explicit.

Only the columns both sides have are written: a column only the replica has takes its default in a
REPLACEd row (the plan says so in its header when a table's definitions differ).

Rows are held with their long values as digests (sql.held_expr). A row the plan writes (REPLACE,
INSERT) that holds one is re-read whole on the master, one row at a time, when it is written
(`WholeRows`); if its row hash is no longer the one judged (written since), the plan says so in a
comment instead of writing a value nobody compared. A keyless surplus copy is deleted by its digest:
`MD5(col) = '..' AND LENGTH(col) = n`, byte exact like its other conditions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
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
HEX_PIECE = 1 << 16


def _value(column: Column, raw: bytes | None, *, in_where: bool = False, mysql_json: bool = False) -> str:
    text = literal(decode_value(column, raw))
    if in_where and mysql_json and column.data_type == "json" and raw is not None:
        return f"CAST({text} AS JSON)"
    return text


def _columns(plan: TablePlan) -> str:
    return "(" + ", ".join(quote_ident(c.name) for c in plan.columns) + ")"


def _row_parts(verb: str, plan: TablePlan, row: Row) -> Iterator[str]:
    """`<verb> INTO t (cols) VALUES (..);` in pieces, a value at a time: a row of 50 MB values is
    written without its whole statement text ever being built (the values' hex is twice their size)."""
    yield f"{verb} INTO {table_ref(plan.schema, plan.name)} {_columns(plan)} VALUES ("
    for i, (c, v) in enumerate(zip(plan.columns, row, strict=True)):
        yield ", " if i else ""
        if v is not None and len(v) > DIGESTED_BYTES and c.data_type in LONG_TYPES:
            yield from _long_literal(c, v)
        else:
            yield _value(c, v)
    yield ");"


def _long_literal(column: Column, raw: bytes) -> Iterator[str]:
    """A long value's literal in pieces: `X'..'` (`_utf8mb4 X'..'` for text, read in utf8mb4), as
    sql.literal writes it, without its whole hex text (twice the value) built at once."""
    yield "X'" if column.data_type in BINARY_TYPES else "_utf8mb4 X'"
    for i in range(0, len(raw), HEX_PIECE):
        yield raw[i : i + HEX_PIECE].hex().upper()
    yield "'"


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
        _digest_condition(plan.replica.exprs[i], digest)
        if (digest := held_digest(c, v)) is not None
        else f"{quote_ident(c.name)} <=> {_value(c, v, in_where=True, mysql_json=mysql_json)}"
        + (exact if c.data_type in _PLAIN_TEXT and v is not None else "")
        for i, (c, v) in enumerate(zip(plan.columns, row, strict=True))
    )
    return f"DELETE FROM {table_ref(plan.schema, plan.name)} WHERE {conds} LIMIT {copies};"


def _digest_condition(expr: str, digest: tuple[str, int]) -> str:
    """A long value held as its digest, matched as the row hash read it (the replica's expression)."""
    return f"MD5({expr}) = '{digest[0]}' AND LENGTH({expr}) = {digest[1]}"


def holds_digest(plan: TablePlan, row: Row | None) -> bool:
    return row is not None and any(held_digest(c, v) is not None for c, v in zip(plan.columns, row, strict=True))


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


def statement_parts(plan: TablePlan, diff: RowDiff, *, mysql_json: bool = False) -> Iterator[Iterable[str]]:
    """The statements that repair one differing row (or one keyless surplus), each in pieces."""
    if diff.key is None:
        if diff.master_row is not None:
            for _ in range(diff.copies):
                yield _row_parts("INSERT", plan, diff.master_row)
            return
        assert diff.replica_row is not None
        yield [delete_copies(plan, diff.replica_row, diff.copies, mysql_json=mysql_json)]
    elif diff.master_row is not None:
        yield _row_parts("REPLACE", plan, diff.master_row)
    else:
        assert diff.replica_row is not None
        yield [delete_by_key(plan, diff.replica_row)]


def statements(plan: TablePlan, diff: RowDiff, *, mysql_json: bool = False) -> list[str]:
    """The statements that repair one differing row (or one keyless surplus)."""
    return ["".join(parts) for parts in statement_parts(plan, diff, mysql_json=mysql_json)]


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
        for diff in sorted(diffs, key=lambda d: d.master_row is not None):  # removals first (module doc)
            if holds_digest(plan, diff.master_row):
                whole = self.whole(plan, diff) if self.whole is not None else None
                if whole is None:
                    key = f" key {list(diff.key)}" if diff.key is not None else ""
                    self.note(f"{plan.display}{key}: changed on the master since it was compared; not written")
                    continue
                diff = replace(diff, master_row=whole)
            for parts in statement_parts(plan, diff, mysql_json=self.mysql_json):
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
