"""Column definitions as information_schema describes them, on MariaDB and on MySQL 8."""

from __future__ import annotations

from audit.sources.mysql.catalog import _column, _leading_columns, _unique_keys, plan_table
from audit.sources.mysql.sql import TableSql
from audit.sources.mysql.values import Column, TableDef, UniqueKey


def _row(name: str, data_type: str, extra: str, expression: str | None = None) -> dict[str, str | None]:
    return {
        "COLUMN_NAME": name,
        "DATA_TYPE": data_type,
        "COLUMN_TYPE": data_type,
        "IS_NULLABLE": "NO",
        "EXTRA": extra,
        "GENERATION_EXPRESSION": expression,
    }


def test_a_mysql_8_column_with_an_expression_default_is_compared_not_taken_for_generated() -> None:
    """MySQL 8 says DEFAULT_GENERATED in EXTRA for `created_at ... DEFAULT CURRENT_TIMESTAMP` (and any
    `DEFAULT (expr)`): taken for a generated column, it was never compared (a key with such a default
    left its table compared as a multiset). Only VIRTUAL / STORED / PERSISTENT columns are generated."""
    rows = [
        _row("id", "binary", "DEFAULT_GENERATED"),  # DEFAULT (UUID_TO_BIN(UUID()))
        _row("created_at", "timestamp", "DEFAULT_GENERATED"),
        _row("updated_at", "timestamp", "DEFAULT_GENERATED on update CURRENT_TIMESTAMP"),
        _row("n", "int", "auto_increment"),
        _row("total", "int", "VIRTUAL GENERATED", "`n` * 2"),
        _row("stored", "int", "STORED GENERATED", "`n` * 3"),
        _row("old", "int", "PERSISTENT", "`n` * 4"),  # MariaDB before 10.2
    ]
    columns = tuple(_column(r) for r in rows)
    assert [c.name for c in columns if c.generated] == ["total", "stored", "old"]
    table = TableDef("s", "t", columns, (UniqueKey("PRIMARY", ("id",), True),))
    plan = plan_table(table, table)
    assert plan.key == ("id",) and [c.name for c in plan.columns] == ["id", "created_at", "updated_at", "n"]


def _index(table: str, index: str, column: str, **more: str) -> dict[str, str | None]:
    return {"TABLE_SCHEMA": "s", "TABLE_NAME": table, "INDEX_NAME": index, "COLUMN_NAME": column,
            "NON_UNIQUE": "0", "SEQ_IN_INDEX": "1", "SUB_PART": None, **more}  # fmt: skip


def test_an_invisible_mysql_8_index_is_neither_a_key_nor_forced() -> None:
    """MySQL 8 rejects FORCE INDEX of an invisible index (IS_VISIBLE NO): the audit stopped on a table
    keyed by one. Like MariaDB's IGNORED, it is not used for chunking or to lead a range."""
    columns = {("s", "t"): [_column(_row("u", "int", ""))]}
    indexes = {
        ("s", "t", "u_hidden"): [_index("t", "u_hidden", "u", IS_VISIBLE="NO")],
        ("s", "t", "u_ignored"): [_index("t", "u_ignored", "u", IGNORED="YES")],
        ("s", "t", "u_seen"): [_index("t", "u_seen", "u", IS_VISIBLE="YES")],
    }
    assert [k.index for k in _unique_keys(indexes, columns)[("s", "t")]] == ["u_seen"]
    del indexes[("s", "t", "u_seen")]
    assert _unique_keys(indexes, columns) == {} and _leading_columns(indexes) == {}


def test_a_column_whose_replica_type_may_hold_the_separator_has_its_length_in_the_row_text() -> None:
    """The master's INT is a VARCHAR on the replica, which may hold '#': both sides' row texts give its
    length, else the master's (1, '2#3') and the replica's ('1#2', '3') were one text."""
    key = (UniqueKey("PRIMARY", ("id",), True),)
    text = Column("s", "varchar", "varchar(9)")
    master = TableDef("s", "t", (Column("id", "int", "int"), Column("n", "int", "int"), text), key)
    replica = TableDef("s", "t", (Column("id", "int", "int"), Column("n", "varchar", "varchar(9)"), text), key)
    plan = plan_table(master, replica)
    assert plan.separators == frozenset({"n"})
    for side in ("master", "replica"):
        assert "LENGTH(`n`)" in TableSql(plan, side, "crc32").hash
    assert plan_table(master, master).separators == frozenset()
