"""SQL text of kind mysql: quoting, literals that mean the same under any sql_mode, hashes, key ranges."""

from __future__ import annotations

from decimal import Decimal

import pytest

from audit.sources.mysql.sql import (
    column_expr,
    decode_value,
    from_json_value,
    hashed_expr,
    json_value,
    key_in,
    key_order,
    key_tag,
    literal,
    may_hold_separator,
    quote_ident,
    range_where,
    row_hash,
    row_string,
    set_members,
    table_ref,
)
from audit.sources.mysql.values import Column


def col(name: str, data_type: str, column_type: str | None = None, **kw: object) -> Column:
    return Column(name, data_type, column_type or data_type, **kw)  # type: ignore[arg-type]


def test_identifiers_with_backquotes_spaces_and_non_ascii() -> None:
    assert quote_ident("a`b") == "`a``b`"
    assert table_ref("my shop", "órdenes 100%") == "`my shop`.`órdenes 100%`"


@pytest.mark.parametrize(
    ("value", "sql"),
    [
        (None, "NULL"),
        (42, "42"),
        (-7, "-7"),
        (Decimal("12.50"), "12.50"),
        (0.1, "0.1"),
        (1.2345677614212036, "1.2345677614212036"),
        ("O'Brien", "'O''Brien'"),
        ("tab\there", "_utf8mb4 X'7461620968657265'"),
        ("back\\slash", "_utf8mb4 X'6261636B5C736C617368'"),
        ("é ☃ 😀", "'é ☃ 😀'"),
        (b"\x00\xffA", "X'00FF41'"),
        (b"", "X''"),
    ],
)
def test_literals(value: object, sql: str) -> None:
    assert literal(value) == sql  # type: ignore[arg-type]


def test_typed_values_round_trip_through_json() -> None:
    binary, dec, text = col("k", "varbinary"), col("d", "decimal", "decimal(9,2)"), col("t", "varchar")
    assert decode_value(binary, b"\x00\xff") == b"\x00\xff"
    assert json_value(binary, b"\x00\xff") == "0x00ff"
    assert from_json_value(binary, "0x00ff") == b"\x00\xff"
    assert decode_value(dec, b"12.50") == Decimal("12.50") and json_value(dec, Decimal("12.50")) == "12.50"
    assert from_json_value(dec, "12.50") == Decimal("12.50")
    assert decode_value(col("b", "bit"), b"5") == 5 and decode_value(col("i", "bigint"), b"-3") == -3
    assert decode_value(text, "A-17 é".encode()) == "A-17 é" and decode_value(text, None) is None


def test_a_replicas_text_copy_of_a_number_column_decodes_as_its_text() -> None:
    """A migration made the master's INT, DECIMAL or DOUBLE a VARCHAR on the replica, which holds 'n/a':
    decoding it as the master's type raised (decimal.InvalidOperation, ValueError) and stopped the audit
    when its finding was shown; it is shown (and written by the repair plan) as the text it is."""
    for data_type in ("int", "bit", "decimal", "double", "float"):
        assert decode_value(col("v", data_type), b"n/a") == "n/a"
        assert decode_value(col("v", data_type), b"1#2") == "1#2"
    assert decode_value(col("v", "int"), b"5.5") == Decimal("5.5") and decode_value(col("v", "double"), b"1e3") == 1e3


def test_column_expressions_normalise_what_text_would_hide_or_split() -> None:
    assert column_expr(col("f", "float")) == "CAST(`f` AS DOUBLE)"
    assert column_expr(col("b", "bit", "bit(8)")) == "CAST(`b` AS UNSIGNED)"
    assert column_expr(col("d", "decimal", "decimal(9,2)")) == "`d`"
    # a definition that differs between the sides: both brought to a shared form
    m, r = col("d", "decimal", "decimal(9,2)"), col("d", "decimal", "decimal(12,4)")
    assert "TRIM(TRAILING '0'" in column_expr(m, r) and "TRIM(TRAILING '0'" in column_expr(r, m)
    m, r = col("s", "varchar", "varchar(10)", charset="latin1"), col("s", "varchar", "varchar(10)", charset="utf8mb4")
    assert column_expr(m, r) == "CONVERT(`s` USING utf8mb4)"
    m, r = col("t", "datetime", "datetime"), col("t", "datetime", "datetime(6)")
    assert column_expr(m, r) == "CAST(`t` AS DATETIME(6))"


def test_a_set_whose_definition_differs_is_read_as_its_members_in_one_order() -> None:
    assert set_members("set('a''b','c\\\\d','é','')") == ["a'b", "c\\d", "é", ""]
    m, r = col("s", "set", "set('x','y')"), col("s", "set", "set('y','x','w')")
    expr = (
        "IF(`s` IS NULL, NULL, CONCAT_WS(',', "
        + ", ".join(f"IF(FIND_IN_SET('{x}', `s`), '{x}', NULL)" for x in "wxy")
        + "))"
    )
    assert column_expr(m, r) == column_expr(r, m) == expr


def test_row_string_flags_only_what_can_be_ambiguous() -> None:
    s = row_string(["`id`", "`a`", "`b`"], [False, True, False], [False, True, True])
    assert s == "CONCAT_WS('#', `id`, `a`, `b`, CONCAT(ISNULL(`a`)), CONCAT_WS(',', LENGTH(`a`)))"
    three = row_string(["`a`", "`b`", "`c`"], [False] * 3, [True] * 3)
    assert three == "CONCAT_WS('#', `a`, `b`, `c`, CONCAT_WS(',', LENGTH(`a`), LENGTH(`b`)))"
    assert not may_hold_separator(col("e", "enum", "enum('new','paid')"))
    assert may_hold_separator(col("e", "enum", "enum('#1','b')")) and may_hold_separator(col("j", "json"))
    # one column that may hold '#' among columns that cannot: no lengths needed; no nullable column: no flags
    assert row_string(["`id`", "`a`"], [False, False], [False, True]) == "CONCAT_WS('#', `id`, `a`)"
    assert row_hash(["`a`"], [True], [True]).startswith("CRC32(")
    assert row_hash(["`a`"], [True], [True], "md5").startswith("CAST(CONV(LEFT(MD5(")


def test_long_values_are_hashed_as_their_digest_so_no_row_text_outgrows_the_packet() -> None:
    # a short value that begins like a digest's text (md5:) or like its escape (raw:) is escaped as raw:<value>
    short = "IF(LEFT(`t`, 4) IN (_binary'md5:', _binary'raw:'), CONCAT(_binary'raw:', `t`), `t`)"
    assert hashed_expr(col("t", "longtext"), "`t`") == (
        f"IF(LENGTH(`t`) > 8192, CONCAT(_binary'md5:', MD5(`t`)), {short})"
    )
    assert hashed_expr(col("g", "geometry"), "`g`").startswith("IF(LENGTH(`g`) > 8192")
    assert hashed_expr(col("v", "varchar", "varchar(100)"), "`v`") == "`v`"
    assert hashed_expr(col("b", "varbinary", "varbinary(16)"), "`b`") == "`b`"


def test_text_in_a_legacy_character_set_enters_the_row_text_as_its_bytes() -> None:
    """latin1 and cp1251 columns in one row text were an 'Illegal mix of collations' (the audit stopped)."""
    assert hashed_expr(col("l", "varchar", "varchar(9)", charset="latin1"), "`l`") == "CAST(`l` AS BINARY)"
    assert hashed_expr(col("c", "text", charset="cp1251"), "`c`").startswith("IF(LENGTH(CAST(`c` AS BINARY)) > 8192")
    assert hashed_expr(col("u", "varchar", "varchar(9)", charset="utf8mb4"), "`u`") == "`u`"


def test_key_ranges_are_spelt_out_for_the_optimiser() -> None:
    assert range_where(["id"], None, None) == "1=1"
    assert range_where(["id"], (10,), (20,)) == "`id` >= 10 AND `id` < 20"
    assert range_where(["a", "b"], ("x", 3), None) == "((`a` > 'x') OR (`a` = 'x' AND `b` >= 3))"
    assert range_where(["a", "b"], None, ("y", 1)) == "((`a` < 'y') OR (`a` = 'y' AND `b` < 1))"
    assert key_in(["id"], [(1,), (2,)]) == "`id` IN (1, 2)"
    assert key_in(["a", "b"], [("x", b"\x01")]) == "(`a`, `b`) IN (('x', X'01'))"


def test_rows_read_by_key_are_tagged_with_the_key_they_matched() -> None:
    assert key_tag(["k"], [("a",), ("b ",)]) == "CASE WHEN `k` = 'a' THEN 0 WHEN `k` = 'b ' THEN 1 END"
    assert key_tag(["a", "b"], [("x", 1)]) == "CASE WHEN `a` = 'x' AND `b` = 1 THEN 0 END"


def test_a_key_sorts_alike_on_both_sides_only_in_the_same_collation() -> None:
    def text(data_type: str, collation: str = "utf8mb4_general_ci") -> Column:
        return col("k", data_type, data_type, charset=collation.split("_")[0], collation=collation)

    assert key_order(text("varchar")) == key_order(text("char"))
    assert key_order(text("varchar")) != key_order(text("varchar", "utf8mb4_bin"))
    assert key_order(text("varchar")) != key_order(text("varchar", "latin1_swedish_ci"))
    assert key_order(col("k", "enum", "enum('b','a')")) == key_order(col("k", "enum", "enum('a','b')"))
    assert key_order(col("n", "int")) == key_order(col("n", "bigint")) == key_order(col("n", "decimal"))
    assert key_order(col("n", "int")) != key_order(text("varchar"))
    assert key_order(col("b", "binary", "binary(4)")) == key_order(col("b", "varbinary", "varbinary(4)"))
