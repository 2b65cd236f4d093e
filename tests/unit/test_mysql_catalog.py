"""Column definitions as information_schema describes them, on MariaDB and on MySQL 8."""

from __future__ import annotations

from audit.sources.mysql.catalog import _column, plan_table
from audit.sources.mysql.values import TableDef, UniqueKey


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
