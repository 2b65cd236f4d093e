"""The byte budget of kind mysql: held row widths from a table's definition, keys per fetch, the setting."""

from __future__ import annotations

import pytest

from audit.errors import ConfigError
from audit.inventory import parse_inventory
from audit.sources.mysql.budget import KEYS_PER_FETCH, VALUE_OVERHEAD, held_row_bytes, held_value_bytes, keys_per_fetch
from audit.sources.mysql.endpoint import MySQLSettings
from audit.sources.mysql.sql import DIGESTED_BYTES, TableSql, held_digest
from audit.sources.mysql.values import Column, SideSql, TablePlan

ID = Column("id", "int", "int(11)", nullable=False)
BODY = Column("body", "longblob", "longblob")
DOC = Column("doc", "longtext", "longtext", charset="latin1")
NOTE = Column("note", "varchar", "varchar(20)")


def plan(*columns: Column) -> TablePlan:
    exprs = tuple(f"`{c.name}`" for c in columns)
    return TablePlan("s", "t", columns, ("id",), SideSql(exprs, None), SideSql(exprs, None))


def test_a_held_value_is_bounded_by_the_definition_never_by_the_data() -> None:
    assert held_value_bytes(BODY) == DIGESTED_BYTES  # a 2 GB BLOB is held as md5:<hex>:<bytes>
    assert held_value_bytes(DOC) == 4 * DIGESTED_BYTES  # latin1 text read in utf8mb4
    assert held_value_bytes(NOTE) == 80 and held_value_bytes(Column("b", "varbinary", "varbinary(300)")) == 300
    assert held_value_bytes(Column("e", "enum", "enum('a','b')")) == 4 * len("enum('a','b')")
    assert held_value_bytes(ID) == held_value_bytes(Column("d", "decimal", "decimal(65,30)")) == 80
    wide = plan(ID, NOTE, BODY, DOC)
    assert held_row_bytes(wide) == 80 + 80 + 8192 + 32768 + 4 * VALUE_OVERHEAD + (80 + VALUE_OVERHEAD) + 128


def test_keys_per_fetch_fill_the_budget_and_no_more() -> None:
    row = held_row_bytes(plan(ID, NOTE, BODY, DOC))  # 41,664 bytes
    assert keys_per_fetch(row, 64 << 20, reads=2) == 500  # the statement's cap, not the budget
    assert keys_per_fetch(row, 1 << 20, reads=2) == 12 and 2 * 12 * row <= 1 << 20 < 2 * 13 * row
    assert keys_per_fetch(row, 1 << 20, reads=3) == 8 and 3 * 8 * row <= 1 << 20 < 3 * 9 * row
    assert keys_per_fetch(10 << 20, 1 << 20, reads=3) == 1  # one row over the budget is still read
    assert keys_per_fetch(100, 1 << 30, reads=1) == KEYS_PER_FETCH


def test_rows_are_read_held_and_only_the_repair_plan_reads_them_whole() -> None:
    sql = TableSql(plan(ID, BODY), "master", "crc32")
    held = sql.rows_by_key([(1,)])
    assert held.startswith("SELECT `id`, IF(LENGTH(`body`) > 8192, CONCAT(_binary'md5:', MD5(`body`), _binary':', ")
    assert sql.rows_by_key([(1,)], whole=True).startswith("SELECT `id`, `body`, CRC32(")
    assert held_digest(BODY, b"md5:" + b"0" * 32 + b":9000") == ("0" * 32, 9000)
    assert held_digest(BODY, b"md5:short") is None and held_digest(NOTE, b"md5:" + b"0" * 32 + b":9000") is None


def test_the_setting_is_validated_naming_the_field() -> None:
    assert MySQLSettings().max_fetch_bytes == 64 << 20
    with pytest.raises(ConfigError, match=r"pairs\[0\].settings.max_fetch_bytes: Input should be greater than or"):
        MySQLSettings.from_mapping({"max_fetch_bytes": 1000}, "pairs[0].settings")
    with pytest.raises(ConfigError, match=r"max_fetch_bytes"):
        parse_inventory(
            "pairs: [{name: p, kind: mysql, master: 'mysql://u@h:1', replica: 'mysql://u@h:2', "
            "settings: {max_fetch_bytes: 64}}]"
        )
