"""The repair plan's statements: keys quoted right, values as literals, keyless tables handled."""

from __future__ import annotations

from pathlib import Path

from audit.sources.mysql.repair import RepairPlan, statements
from audit.sources.mysql.row_diff import RowDiff
from audit.sources.mysql.values import Column, SideSql, TablePlan

COLUMNS = (
    Column("k`ey", "varbinary", "varbinary(16)", nullable=False),
    Column("n°", "int", "int(11)", nullable=False),
    Column("note", "text", "text"),
    Column("price", "decimal", "decimal(9,2)"),
    Column("flag", "bit", "bit(3)"),
)
PLAN = TablePlan("my shop", "t 1", COLUMNS, ("k`ey", "n°"), SideSql((), None), SideSql((), None))
KEYLESS = TablePlan("s", "log", COLUMNS[2:4], (), SideSql((), None), SideSql((), None))
MASTER_ROW = (b"\x00\xff", b"7", b"it's \\ fine", b"12.50", b"5")


def test_missing_row_is_inserted_with_the_masters_values() -> None:
    diff = RowDiff(0, (b"\x00\xff", 7), MASTER_ROW, None, 1, None)
    assert statements(PLAN, diff) == [
        "INSERT INTO `my shop`.`t 1` (`k``ey`, `n°`, `note`, `price`, `flag`) VALUES "
        "(X'00FF', 7, _utf8mb4 X'69742773205C2066696E65', 12.50, 5);"
    ]


def test_different_row_is_updated_in_the_columns_that_differ_by_the_replicas_key() -> None:
    """Not REPLACE (a delete and an insert: a column only the replica has went back to its default);
    the key as the replica holds it ('A' for the master's 'a' under a case-insensitive key) is matched
    and respelt by SET."""
    replica_row = (b"\x00\xff", b"7", b"it's \\ fine", b"12.40", b"5")
    diff = RowDiff(0, (b"\x00\xff", 7), MASTER_ROW, replica_row, 1, 2)
    assert statements(PLAN, diff) == [
        "UPDATE `my shop`.`t 1` SET `price` = 12.50 WHERE `k``ey` = X'00FF' AND `n°` = 7 LIMIT 1;"
    ]
    text = Column("k", "varchar", "varchar(4)", nullable=False)
    ci = TablePlan("s", "ci", (text, COLUMNS[1]), ("k",), SideSql((), None), SideSql((), None))
    respelt = RowDiff(0, ("a",), (b"a", b"1"), (b"A", b"2"), 1, 2)
    assert statements(ci, respelt) == ["UPDATE `s`.`ci` SET `k` = 'a', `n°` = 1 WHERE `k` = 'A' LIMIT 1;"]


def test_plan_deletes_then_updates_then_inserts(tmp_path: Path) -> None:
    """A DELETE or an UPDATE may free a unique value an INSERT then writes (module doc)."""
    missing = RowDiff(0, (b"\x01", 1), (b"\x01", b"1", None, None, None), None, 1, None)
    changed = RowDiff(0, (b"\x02", 2), (b"\x02", b"2", None, None, None), (b"\x02", b"2", b"x", None, None), 1, 2)
    extra = RowDiff(0, (b"\x03", 3), None, (b"\x03", b"3", None, None, None), None, 3)
    with RepairPlan(tmp_path / "fix.sql", "r") as plan:
        plan.add(PLAN, [missing, changed, extra])
    verbs = [line.split()[0] for line in (tmp_path / "fix.sql").read_text().splitlines()[-4:-1]]
    assert verbs == ["DELETE", "UPDATE", "INSERT"]


def test_extra_row_is_deleted_by_its_key() -> None:
    diff = RowDiff(0, (b"\x00\xff", 7), None, (b"\x00\xff", b"7", None, None, None), None, 2)
    assert statements(PLAN, diff) == ["DELETE FROM `my shop`.`t 1` WHERE `k``ey` = X'00FF' AND `n°` = 7 LIMIT 1;"]


def test_keyless_copies() -> None:
    missing = RowDiff(0, None, (b"O'Brien", None), None, 1, None, copies=2)
    assert statements(KEYLESS, missing) == ["INSERT INTO `s`.`log` (`note`, `price`) VALUES ('O''Brien', NULL);"] * 2
    extra = RowDiff(0, None, None, (b"x", b"1.00"), None, 1, copies=3)
    assert statements(KEYLESS, extra) == [
        "DELETE FROM `s`.`log` WHERE `note` <=> 'x' COLLATE utf8mb4_nopad_bin AND `price` <=> 1.00 LIMIT 3;"
    ]
    # text byte for byte: 'X' and 'x ' are other rows (MySQL's utf8mb4_bin still pads)
    assert statements(KEYLESS, extra, mysql_json=True)[0].startswith(
        "DELETE FROM `s`.`log` WHERE `note` <=> 'x' COLLATE utf8mb4_bin AND"
    )
    json_plan = TablePlan("s", "j", (Column("doc", "json", "json"),), (), SideSql((), None), SideSql((), None))
    extra_json = RowDiff(0, None, None, (b'{"a": 1}',), None, 1)
    assert statements(json_plan, extra_json, mysql_json=True) == [
        "DELETE FROM `s`.`j` WHERE `doc` <=> CAST('{\"a\": 1}' AS JSON) LIMIT 1;"
    ]


def test_plan_file_is_a_transaction_that_says_where_to_run_it(tmp_path: Path) -> None:
    path = tmp_path / "repair" / "shop-db.sql"
    with RepairPlan(path, "mysql://auditor:***@10.0.0.10:3306", "shop-db") as plan:
        plan.note("my shop.t 1: definitions differ; only the common columns are written")
        plan.add(PLAN, [RowDiff(0, (b"\x00\xff", 7), MASTER_ROW, None, 1, None)])
    text = path.read_text()
    assert text.startswith("-- replica-audit repair plan for pair shop-db: run on the REPLICA mysql://auditor:***@")
    assert "START TRANSACTION;\n-- my shop.t 1: definitions differ" in text and text.endswith("COMMIT;\n")
    assert plan.statements == 1 and "\nSET SESSION time_zone = '+00:00';\n" in text


def test_a_long_value_is_written_in_pieces_as_the_literal_it_is() -> None:
    """A 200 KB value is written a 64 KiB slice of hex at a time, reading as sql.literal's text would."""
    body = Column("body", "longblob", "longblob")
    doc = Column("doc", "longtext", "longtext")
    wide = TablePlan("s", "w", (COLUMNS[1], body, doc), ("n°",), SideSql((), None), SideSql((), None))
    blob, text = bytes(range(256)) * 800, "é\\'x".encode() * 50_000
    (statement,) = statements(wide, RowDiff(0, (7,), (b"7", blob, text), None, 1, None))
    assert statement == (
        f"INSERT INTO `s`.`w` (`n°`, `body`, `doc`) VALUES (7, X'{blob.hex().upper()}', "
        f"_utf8mb4 X'{text.hex().upper()}');"
    )


def test_a_row_held_with_a_digest_is_re_read_whole_or_left_out(tmp_path: Path) -> None:
    """The plan writes the master's whole row (re-read); one changed since it was judged is a comment."""
    body = Column("body", "longblob", "longblob")
    wide = TablePlan("s", "w", (COLUMNS[1], body), ("n°",), SideSql((), None), SideSql((), None))
    held = (b"7", b"md5:" + b"a" * 32 + b":9000")
    whole = {(7,): (b"7", b"z" * 9000)}
    with RepairPlan(tmp_path / "fix.sql", "r", whole=lambda _, d: whole.get(d.key or ())) as plan:
        plan.add(wide, [RowDiff(0, (7,), held, None, 1, None), RowDiff(0, (8,), held, None, 1, None)])
    text = (tmp_path / "fix.sql").read_text()
    assert f"INSERT INTO `s`.`w` (`n°`, `body`) VALUES (7, X'{'7A' * 9000}');\n" in text
    assert "-- s.w key [8]: changed on the master since it was compared; not written\n" in text
    assert plan.statements == 1


def test_an_update_re_reads_a_long_value_only_when_it_writes_it(tmp_path: Path) -> None:
    """An UPDATE writes the columns that differ: a long value held alike on both sides is not re-read."""
    body = Column("body", "longblob", "longblob")
    wide = TablePlan("s", "w", (COLUMNS[1], body, COLUMNS[3]), ("n°",), SideSql((), None), SideSql((), None))
    held = b"md5:" + b"a" * 32 + b":9000"
    reads: list[object] = []

    def whole(_: TablePlan, diff: RowDiff) -> tuple[bytes, ...]:
        reads.append(diff.key)
        return (b"7", b"z" * 9000, b"2.00")

    same_body = RowDiff(0, (7,), (b"7", held, b"2.00"), (b"7", held, b"1.00"), 1, 2)
    new_body = RowDiff(0, (7,), (b"7", held, b"2.00"), (b"7", b"md5:" + b"b" * 32 + b":9000", b"2.00"), 1, 3)
    with RepairPlan(tmp_path / "fix.sql", "r", whole=whole) as plan:
        plan.add(wide, [same_body, new_body])
    text = (tmp_path / "fix.sql").read_text()
    assert "UPDATE `s`.`w` SET `price` = 2.00 WHERE `n°` = 7 LIMIT 1;\n" in text
    assert f"UPDATE `s`.`w` SET `body` = X'{'7A' * 9000}' WHERE `n°` = 7 LIMIT 1;\n" in text
    assert reads == [(7,)]
