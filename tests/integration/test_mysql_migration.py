"""Kind mysql after a migration: the two sides define a table differently (a migration tool changed a
key, a type, a character set) yet hold the same data, or hold one planted difference. The healthy copy
must give no row finding (a `schema_mismatch` names the definitions), the planted one exactly its own.

Each table is created on each side on its own (sql_log_bin = 0), so the replica keeps replicating and
the definitions may differ; one MariaDB pair serves the module."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.local.mariadb_server import MariaDBServer, free_port, mariadb_available
from audit.sources.mysql.engine import RowsAudit, audit_tables
from tests.integration.mysql_pair import FAST, Pair, start_module_pair, statements

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not mariadb_available(), reason="mariadbd not installed (apt-get install mariadb-server)"),
]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    yield from start_module_pair(tmp_path_factory.mktemp("mysql-migration"))


@pytest.fixture()
def schema(pair: Pair) -> str:
    return pair.new_schema()


def migrated(pair: Pair, table: str, master_ddl: str, replica_ddl: str, *load: str) -> None:
    """`table` defined as each side's DDL says (`{t}` in a statement is the table), loaded alike on both."""
    for server, ddl in ((pair.master, master_ddl), (pair.replica, replica_ddl)):
        server.execute("SET SESSION sql_log_bin = 0", ddl.format(t=table), *(s.format(t=table) for s in load))


def rows_found(result: RowsAudit) -> list[tuple[str, bytes | None, object]]:
    """(category, key, what differs) of each row finding, sorted."""
    out = []
    for f in result.findings:
        if f.category != "schema_mismatch":
            out.append((f.category, f.key, f.evidence.get("values") or f.evidence.get("row")))
    return sorted(out, key=repr)


def mismatch(result: RowsAudit) -> dict[str, object]:
    found = [f.evidence for f in result.findings if f.category == "schema_mismatch"]
    assert len(found) == 1, result.findings
    return found[0]


# --- keys -------------------------------------------------------------------------------------------------


def test_a_composite_key_in_another_column_order_still_reports_rows_by_key(pair: Pair, schema: str) -> None:
    """PRIMARY KEY (a, b) on the master, (b, a) on the replica: no index of the replica starts with a, and
    the table was compared as a keyless multiset: a changed row was a keyless missing_row and extra_row.
    The replica's key identifies rows all the same: compared by key digests, one finding per row."""
    t = f"{schema}.k"
    load = f"INSERT INTO {{t}} SELECT seq % 7, seq, seq FROM {schema}.seq_1_to_300"
    migrated(
        pair,
        t,
        "CREATE TABLE {t} (a INT, b INT, v INT, PRIMARY KEY (a, b))",
        "CREATE TABLE {t} (a INT, b INT, v INT, PRIMARY KEY (b, a))",
        load,
    )
    healthy = pair.audit([t])
    assert rows_found(healthy) == [] and healthy.tables[0]["equal"]
    assert mismatch(healthy)["key"] == {"master": ("a", "b"), "replica": ("b", "a")}

    pair.on_replica_only(f"UPDATE {t} SET v = 0 WHERE b = 42", f"DELETE FROM {t} WHERE b = 43")
    pair.on_replica_only(f"INSERT INTO {t} VALUES (1, 1000, 1)")
    planted = pair.audit([t])
    assert rows_found(planted) == [
        ("extra_row", b"[1, 1000]", None),
        ("missing_row", b"[1, 43]", None),
        ("row_mismatch", b"[0, 42]", {"v": {"master": 42, "replica": 0}}),
    ]
    assert mismatch(planted)["compared"].startswith("by key digests")


def test_a_second_copy_on_a_replica_whose_key_is_not_unique_is_found(pair: Pair, schema: str) -> None:
    """The replica's primary key turned into a plain index: a second copy of a row there was matched to
    the master's row by key and never reported (301 rows against 300, no finding). The key is unique on
    one side only: the table is a multiset, and the copy one extra_row."""
    t = f"{schema}.dup"
    migrated(
        pair,
        t,
        "CREATE TABLE {t} (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE {t} (id INT NOT NULL, v INT, KEY (id))",
        f"INSERT INTO {{t}} SELECT seq, seq FROM {schema}.seq_1_to_300",
    )
    assert rows_found(pair.audit([t])) == []

    pair.on_replica_only(f"INSERT INTO {t} VALUES (42, 42)")
    planted = pair.audit([t])
    assert rows_found(planted) == [("extra_row", None, {"id": 42, "v": 42})]
    assert (planted.tables[0]["master_rows"], planted.tables[0]["replica_rows"]) == (300, 301)
    assert mismatch(planted)["compared"].startswith("as a multiset")


# (name, master key column, replica key column, key of row seq, a key no row has)
KEYED = [
    ("uniq_pk", "id INT NOT NULL, UNIQUE KEY u (id)", "id INT PRIMARY KEY", "seq", "1000"),
    ("neg_zero", "id INT PRIMARY KEY", "id BIGINT PRIMARY KEY", "CAST(seq AS SIGNED) - 150", "-1000"),
    ("huge", "id BIGINT UNSIGNED PRIMARY KEY", "id BIGINT UNSIGNED PRIMARY KEY", "18446744073709551615 - seq", "0"),
    ("dec", "id DECIMAL(10,2) PRIMARY KEY", "id DECIMAL(12,4) PRIMARY KEY", "(CAST(seq AS SIGNED) - 150) / 4", "0.125"),
    ("dt", "id DATETIME PRIMARY KEY", "id DATETIME(6) PRIMARY KEY", "'2024-01-01' + INTERVAL seq MINUTE", "NOW()"),
    ("uuid", "id BINARY(16) PRIMARY KEY", "id BINARY(16) PRIMARY KEY", "UNHEX(MD5(seq))", "UNHEX(REPEAT('00', 16))"),
]


def test_keys_of_every_kind_a_migration_keeps_or_retypes_find_each_row_once(pair: Pair, schema: str) -> None:
    """A key PRIMARY on one side and UNIQUE on the other, negative and zero, above 2^63, DECIMAL and
    DATETIME retyped, BINARY(16) UUIDs: a healthy copy gives no row finding, and a changed, a deleted
    and an added row are each one finding by their key."""
    tables = []
    for name, m_key, r_key, key, _ in KEYED:
        t = f"{schema}.{name}"
        load = f"INSERT INTO {{t}} SELECT {key}, seq FROM {schema}.seq_1_to_300"
        migrated(pair, t, f"CREATE TABLE {{t}} ({m_key}, v INT)", f"CREATE TABLE {{t}} ({r_key}, v INT)", load)
        tables.append(t)
    assert rows_found(pair.audit(tables)) == []

    for name, *_, new in KEYED:
        t = f"{schema}.{name}"
        pair.on_replica_only(
            f"UPDATE {t} SET v = 0 WHERE v = 42", f"DELETE FROM {t} WHERE v = 43", f"INSERT INTO {t} VALUES ({new}, 0)"
        )
    found = pair.audit(tables).findings
    rows = sorted((f.evidence["table"], f.category) for f in found if f.category != "schema_mismatch")
    planted = ("extra_row", "missing_row", "row_mismatch")
    assert rows == sorted((f"{schema}.{name}", category) for name, *_ in KEYED for category in planted)


def test_an_integer_key_the_replica_holds_as_decimal_is_compared_not_a_crash(pair: Pair, schema: str) -> None:
    """INT on the master, DECIMAL(10,2) on the replica: the key's span was read as int(b'1.00') and a
    replica key 5.5 as int(b'5.5'): a ValueError ended the audit (exit 4), healthy copy or not."""
    t = f"{schema}.dk"
    migrated(
        pair,
        t,
        "CREATE TABLE {t} (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE {t} (id DECIMAL(10,2) PRIMARY KEY, v INT)",
        f"INSERT INTO {{t}} SELECT seq, seq FROM {schema}.seq_1_to_300",
    )
    assert rows_found(pair.audit([t])) == []

    pair.on_replica_only(f"INSERT INTO {t} VALUES (5.5, 1)", f"UPDATE {t} SET v = 0 WHERE id = 200")
    assert rows_found(pair.audit([t])) == [
        ("extra_row", b'["5.5"]', None),
        ("row_mismatch", b"[200]", {"v": {"master": 200, "replica": 0}}),
    ]


def test_columns_whose_names_changed_case_are_one_column(pair: Pair, schema: str) -> None:
    """A migration tool wrote `id`, `name` for the master's `ID`, `Name`: names the servers compare
    without case were matched with it, so the table had no common column (an SQL syntax error ended
    the audit) or, with one left, the renamed ones were never compared. One column each now: its
    values compared, the new spelling a schema_mismatch."""
    t = f"{schema}.cc"
    migrated(
        pair,
        t,
        "CREATE TABLE {t} (ID INT PRIMARY KEY, Name VARCHAR(10))",
        "CREATE TABLE {t} (id INT PRIMARY KEY, name VARCHAR(10))",
        f"INSERT INTO {{t}} SELECT seq, CONCAT('n', seq) FROM {schema}.seq_1_to_100",
    )
    healthy = pair.audit([t])
    assert rows_found(healthy) == []
    definitions = mismatch(healthy)["definitions"]
    assert isinstance(definitions, dict)
    names = [(d["master"]["name"], d["replica"]["name"]) for d in definitions.values()]
    assert names == [("ID", "id"), ("Name", "name")]

    pair.on_replica_only(f"UPDATE {t} SET name = 'x' WHERE id = 7")
    assert rows_found(pair.audit([t])) == [("row_mismatch", b"[7]", {"Name": {"master": "n7", "replica": "x"}})]


def test_a_table_with_no_column_in_common_is_a_schema_mismatch_not_a_crash(pair: Pair, schema: str) -> None:
    t = f"{schema}.none"
    migrated(pair, t, "CREATE TABLE {t} (a INT)", "CREATE TABLE {t} (b INT)", "INSERT INTO {t} VALUES (1)")
    result = pair.audit([t])
    assert [f.category for f in result.findings] == ["schema_mismatch"]
    assert mismatch(result)["compared"] == "not compared: no column in common"


# --- column definitions a migration changes, the data kept ------------------------------------------------

# (name, master column, replica column, the values both hold, a planted value of row 1 on the replica)
RETYPED = [
    ("f_double", "FLOAT", "DOUBLE", ["1.1", "-2.5", "3.4e38", "1e-7", "0", "NULL"], "1.2"),
    ("double_f", "DOUBLE", "FLOAT", ["1.1", "-2.5", "0"], "1.2"),
    ("vb_bin", "VARBINARY(4)", "BINARY(4)", ["X'6162'", "X'00'", "X'61620000'", "''", "NULL"], "X'6163'"),
    ("vc_char", "VARCHAR(5)", "CHAR(5)", ["'a  '", "' '", "' a'", "NULL"], "' '"),
    ("dec_dbl", "DECIMAL(10,2)", "DOUBLE", ["1.5", "0.1", "-100", "12345678.91", "NULL"], "1.51"),
    ("int_big", "INT", "BIGINT", ["-5", "0", "10", "100", "2147483647"], "11"),
    ("dec", "DECIMAL(10,2)", "DECIMAL(12,4)", ["1.5", "0", "-0.01", "100", "99999999.99"], "1.5001"),
    ("dt6", "DATETIME", "DATETIME(6)", ["'2024-01-01 10:00:00'", "'0000-00-00 00:00:00'", "NULL"], "'2024-01-01'"),
    ("date_dt", "DATE", "DATETIME", ["'2024-01-02'", "'0000-00-00'", "NULL"], "'2024-01-02 00:00:01'"),
    ("mb3", "VARCHAR(9) CHARSET utf8mb3", "VARCHAR(9) CHARSET utf8mb4", ["'héllo'", "'日本'", "''"], "'hello'"),
    ("wider", "VARCHAR(5)", "VARCHAR(50)", ["'ab'", "'a '", "''", "NULL"], "NULL"),
    ("longer", "TEXT", "LONGTEXT", ["'abc'", "REPEAT('x', 10000)", "NULL"], "'abd'"),
    ("enum", "ENUM('a','bb','c c')", "VARCHAR(10)", ["'a'", "'bb'", "'c c'", "NULL"], "'bb'"),
    # a SET's text lists its members in its definition's order: 'y,x' there is the master's 'x,y'
    ("set", "SET('x','y','z')", "SET('z','y','x')", ["'x,y'", "''", "NULL", "'x,y,z'"], "'y'"),
    # MariaDB's JSON is a LONGTEXT: its text is the value, so a space more is a difference (docs/mysql.md)
    ("json", "JSON", "LONGTEXT", ['\'{"a": 1, "b": [2]}\'', "'[]'", "NULL"], '\'{"a":1, "b": [2]}\''),
]


def test_values_retyped_by_a_migration_compare_in_a_form_both_types_share(pair: Pair, schema: str) -> None:
    """A dump writes a FLOAT as '1.1', which a DOUBLE keeps as 1.1 where the FLOAT held 1.100000023841858:
    every such row was a row_mismatch; 'ab' copied into a BINARY(4) reads 'ab\\0\\0', 'a ' copied into a
    CHAR reads 'a': the same. Each is now compared as the narrower type holds it, the difference only in
    the definitions (schema_mismatch); a value changed beyond that is still found, once."""
    tables = []
    for name, m_type, r_type, values, _ in RETYPED:
        t = f"{schema}.{name}"
        rows = ", ".join(f"({i}, {v})" for i, v in enumerate(values, 1)).replace("{", "{{").replace("}", "}}")
        ddl = "CREATE TABLE {t} (id INT PRIMARY KEY, v %s) CHARSET utf8mb4"
        migrated(pair, t, ddl % m_type, ddl % r_type, "SET SESSION sql_mode = ''", f"INSERT INTO {{t}} VALUES {rows}")
        tables.append(t)
    healthy = pair.audit(tables)
    assert rows_found(healthy) == []
    assert healthy.counts == {"schema_mismatch": len(RETYPED)}

    for name, *_, planted in RETYPED:
        pair.on_replica_only(f"UPDATE {schema}.{name} SET v = {planted} WHERE id = 1")
    found = pair.audit(tables).findings
    rows = sorted((f.evidence["table"], f.category, f.key, f.evidence.get("columns")) for f in found)
    assert [r for r in rows if r[1] != "schema_mismatch"] == sorted(
        (f"{schema}.{name}", "row_mismatch", b"[1]", ["v"]) for name, *_ in RETYPED
    )


def test_a_separator_only_the_replicas_type_can_hold_does_not_hide_a_difference(pair: Pair, schema: str) -> None:
    """An ENUM or INT the migration made a VARCHAR may hold '#', the row text's separator, on the replica
    only. Its length was left out of the row text (the master's type cannot hold '#'), so the master's
    ('a', 'b#c') and the replica's ('a#b', 'c') were one text, one hash: no finding."""
    tables = []
    for name, m_type, value in (("en", "ENUM('a','b')", "'a'"), ("num", "INT", "1")):
        t = f"{schema}.{name}"
        ddl = "CREATE TABLE {t} (id INT PRIMARY KEY, v %s, s VARCHAR(10))"
        rows = f"INSERT INTO {{t}} VALUES (1, {value}, 'b#c'), (2, NULL, 'x')"
        migrated(pair, t, ddl % m_type, ddl % "VARCHAR(10)", rows)
        tables.append(t)
    assert rows_found(pair.audit(tables)) == []

    for t in tables:
        pair.on_replica_only(f"UPDATE {t} SET v = CONCAT(v, '#b'), s = 'c' WHERE id = 1")
    found = pair.audit(tables).findings
    rows = sorted((f.evidence["table"], f.key, f.evidence["columns"]) for f in found if f.category == "row_mismatch")
    assert rows == [(t, b"[1]", ["v", "s"]) for t in tables]


def test_a_column_the_master_generates_and_the_replica_stores_is_compared(
    pair: Pair, schema: str, tmp_path: Path
) -> None:
    """A migration that materialised a generated column leaves a plain column on the replica, whose
    values may drift: they were never compared (a generated column on either side was left out), so a
    drifted value passed. The replica's plain column is now compared with what the master generates,
    and the plan's UPDATE writes it back; a column the replica generates still is not (no repair can
    write it, and it follows from the columns that are compared)."""
    t = f"{schema}.g"
    migrated(
        pair,
        t,
        "CREATE TABLE {t} (id INT PRIMARY KEY, a INT, g INT AS (a * 2) STORED, v INT AS (a + 1) VIRTUAL)",
        "CREATE TABLE {t} (id INT PRIMARY KEY, a INT, g INT, v INT AS (a + 2) VIRTUAL)",
        "INSERT INTO {t} (id, a) VALUES (1, 1), (2, 2), (3, NULL)",
    )
    pair.replica.execute("SET SESSION sql_log_bin = 0", f"UPDATE {t} SET g = a * 2")
    assert rows_found(pair.audit([t])) == []

    pair.on_replica_only(f"UPDATE {t} SET g = 99 WHERE id = 2")
    result = pair.audit([t], repair_path=tmp_path / "fix.sql")
    assert rows_found(result) == [("row_mismatch", b"[2]", {"g": {"master": 4, "replica": 99}})]
    assert sorted(mismatch(result)["columns"]) == ["g", "v"]

    pair.replica.execute("SET SESSION sql_log_bin = 0", *statements(tmp_path / "fix.sql"))
    assert rows_found(pair.audit([t])) == []


def test_a_key_the_replica_cannot_spell_in_its_character_set_is_a_finding_not_a_crash(pair: Pair, schema: str) -> None:
    """A key column moved from utf8mb4 to latin1 (a migration's default character set): the copy of
    '😀' reads '?' there. The replica's rows were read by key, `k IN ('😀', ...)`, which the server
    refuses ('Illegal mix of collations'): the whole audit stopped (exit 3). Such a key now has no row
    there: a missing_row, and the replica's '?' an extra_row."""
    t = f"{schema}.cs"
    migrated(
        pair,
        t,
        "CREATE TABLE {t} (k VARCHAR(10) PRIMARY KEY, v INT) CHARSET utf8mb4",
        "CREATE TABLE {t} (k VARCHAR(10) PRIMARY KEY, v INT) CHARSET latin1 COLLATE latin1_bin",
        "INSERT INTO {t} VALUES ('plain', 1), ('café', 2)",
    )
    assert rows_found(pair.audit([t])) == []

    pair.master.execute("SET SESSION sql_log_bin = 0", f"INSERT INTO {t} VALUES ('😀', 3)")
    pair.on_replica_only(f"INSERT INTO {t} VALUES ('?', 3)", f"UPDATE {t} SET v = 0 WHERE k = 'café'")
    assert rows_found(pair.audit([t])) == [
        ("extra_row", b'["?"]', None),
        ("missing_row", '["😀"]'.encode(), None),
        ("row_mismatch", '["café"]'.encode(), {"v": {"master": 2, "replica": 0}}),
    ]


def test_a_binary_key_one_side_pads_is_compared_as_the_padded_copy(pair: Pair, schema: str, tmp_path: Path) -> None:
    """A key VARBINARY(8) on one side, BINARY(8) on the other: 'ab' copied into the BINARY reads
    'ab' and six 0x00 bytes there, so every short key was a missing_row and an extra_row. Keys cannot
    be matched through the padding ('ab' and 'ab\\0' are two VARBINARY keys, one BINARY key): such a
    table is compared as a multiset of rows, each value as both types hold it, and says so. Keys that
    are all full length on the variable side (UUIDs) keep matching by key."""
    short = ["X'6162'", "X'616263'", "X'0102'", "''", "X'6162636465666768'", "X'61620001'"]
    rows = ", ".join(f"({k}, {i})" for i, k in enumerate(short, 1))
    full = ", ".join(f"(UNHEX(MD5({i})), {i})" for i in range(1, 7))
    tables = {
        "vb_bin": ("VARBINARY(8)", "BINARY(8)", rows),
        "bin_vb": ("BINARY(8)", "VARBINARY(8)", rows),
        "bin_bin": ("BINARY(8)", "BINARY(10)", rows),
        "uuid": ("BINARY(16)", "VARBINARY(16)", full),
    }
    for name, (m_type, r_type, load) in tables.items():
        ddl = "CREATE TABLE {t} (k %s PRIMARY KEY, v INT)"
        migrated(pair, f"{schema}.{name}", ddl % m_type, ddl % r_type, f"INSERT INTO {{t}} VALUES {load}")
    names = [f"{schema}.{name}" for name in tables]
    healthy = pair.audit(names)
    assert rows_found(healthy) == []
    how = {f.evidence["table"]: f.evidence.get("compared") for f in healthy.findings}
    assert how[f"{schema}.uuid"] is None
    for name in ("vb_bin", "bin_vb", "bin_bin"):
        assert str(how[f"{schema}.{name}"]).startswith("as a multiset of rows: key column k is BINARY")

    for name in tables:
        t = f"{schema}.{name}"
        pair.on_replica_only(
            f"UPDATE {t} SET v = 0 WHERE v = 2",
            f"DELETE FROM {t} WHERE v = 3",
            f"INSERT INTO {t} VALUES ({'UNHEX(MD5(9))' if name == 'uuid' else 'X' + repr('7A')}, 9)",
        )
    planted = pair.audit(names, repair_path=tmp_path / "fix.sql")
    found = sorted((f.evidence["table"], f.category, f.key is None) for f in planted.findings)
    assert [f for f in found if f[1] != "schema_mismatch"] == sorted(
        [
            (f"{schema}.{n}", c, True)
            for n in ("vb_bin", "bin_vb", "bin_bin")
            for c in ("missing_row",) * 2 + ("extra_row",) * 2
        ]
        + [(f"{schema}.uuid", c, False) for c in ("extra_row", "missing_row", "row_mismatch")]
    )
    pair.on_replica_only(*statements(tmp_path / "fix.sql"))
    assert rows_found(pair.audit(names)) == []


def test_a_text_key_copied_into_a_char_compares_without_its_trailing_spaces(
    pair: Pair, schema: str, tmp_path: Path
) -> None:
    """A VARCHAR key 'a ' reads 'a' once copied into a CHAR, one key under a PAD SPACE collation (as
    every MariaDB default is): matched by key, each such row was a row_mismatch in k on a healthy copy
    (and the plan's UPDATE to 'a ' could never change the CHAR). Outside the key the trailing spaces
    were already left out; in a key whose collation pads on both sides they are too."""
    t = f"{schema}.ck"
    load = "INSERT INTO {t} VALUES ('a ', 1), ('b', 2), ('c  ', 3), (' d', 4)"
    migrated(
        pair,
        t,
        "CREATE TABLE {t} (k VARCHAR(5) PRIMARY KEY, v INT)",
        "CREATE TABLE {t} (k CHAR(5) PRIMARY KEY, v INT)",
        load,
    )
    assert rows_found(pair.audit([t])) == []

    pair.on_replica_only(f"UPDATE {t} SET v = 0 WHERE k = 'c'", f"DELETE FROM {t} WHERE k = 'a'")
    planted = pair.audit([t], repair_path=tmp_path / "fix.sql")
    assert rows_found(planted) == [
        ("missing_row", b'["a"]', None),
        ("row_mismatch", b'["c"]', {"v": {"master": 3, "replica": 0}}),
    ]
    pair.on_replica_only(*statements(tmp_path / "fix.sql"))
    assert rows_found(pair.audit([t])) == []


def test_a_no_pad_text_key_with_trailing_spaces_copied_into_a_char_is_compared_as_a_multiset(
    pair: Pair, schema: str
) -> None:
    """Under a NO PAD collation (MariaDB's `_nopad_`, MySQL 8's `_0900_`) 'a ' and 'a' are two keys, and
    a CHAR copy holds the VARCHAR's 'a ' as 'a': each such row was a missing_row and an extra_row. As a
    BINARY's padding, it cannot be undone key by key: a side holding such keys makes the table a
    multiset of rows compared without the trailing spaces; without any, it stays compared by key."""
    ddl = "CREATE TABLE {t} (k %s(5) COLLATE utf8mb4_nopad_bin PRIMARY KEY, v INT) CHARSET utf8mb4"
    spaced = "INSERT INTO {t} VALUES ('a ', 1), ('b', 2), ('c  ', 3)"
    plain = "INSERT INTO {t} VALUES ('a', 1), ('b', 2), (' c', 3)"
    for name, load in (("spaced", spaced), ("plain", plain)):
        migrated(pair, f"{schema}.{name}", ddl % "VARCHAR", ddl % "CHAR", load)
    names = [f"{schema}.spaced", f"{schema}.plain"]
    healthy = pair.audit(names)
    assert rows_found(healthy) == []
    how = {f.evidence["table"]: f.evidence.get("compared") for f in healthy.findings}
    assert str(how[f"{schema}.spaced"]).startswith("as a multiset of rows: key column k is CHAR on the replica")
    assert how[f"{schema}.plain"] is None

    pair.on_replica_only(*(f"UPDATE {t} SET v = 0 WHERE v = 2" for t in names))
    found = sorted((f.evidence["table"], f.category, f.key) for f in pair.audit(names).findings)
    assert [f for f in found if f[1] != "schema_mismatch"] == [
        (f"{schema}.plain", "row_mismatch", b'["b"]'),
        (f"{schema}.spaced", "extra_row", None),
        (f"{schema}.spaced", "missing_row", None),
    ]


# --- server settings --------------------------------------------------------------------------------------


OTHER_SETTINGS = (
    "--lower-case-table-names=1",
    "--default-time-zone=+05:30",
    "--character-set-server=latin1",
    "--collation-server=latin1_swedish_ci",
    "--sql-mode=ALLOW_INVALID_DATES,PAD_CHAR_TO_FULL_LENGTH,ANSI_QUOTES,NO_BACKSLASH_ESCAPES",
    "--explicit-defaults-for-timestamp=OFF",
    "--div-precision-increment=9",
)
"""A migration target's server settings, each unlike the test master's (its system time zone too)."""


def test_a_target_with_other_server_settings_compares_the_same_rows(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A target started with lower_case_table_names = 1 lists the master's `Shop.Orders` as
    `shop.orders`: the table was a missing_table (and, auditing every table, an extra_table) and its
    rows were never compared. It is now the same table, in the case-sensitive side's spelling, either
    way round, and named in `tables:` as either side spells it. The target's other settings (time
    zones, default character set, sql_mode, timestamp defaults) change no verdict: TIMESTAMPs copied
    as the same instants are equal, one stored at another instant is the one finding."""
    db = "Shop_" + secrets.token_hex(2)
    ddl = f"CREATE TABLE {db}.Orders (id INT PRIMARY KEY, v INT, c CHAR(4), ts TIMESTAMP, d DATETIME) CHARSET utf8mb4"
    utc = "SET SESSION time_zone = '+00:00'"  # as a dump loads TIMESTAMPs: the instants, not the clock
    rows = "(1, 1, 'a', '2024-03-10 07:30:00', '2024-01-01'), (2, 2, '', '2024-11-03 06:30:00', NULL)"
    load = f"INSERT INTO {db}.Orders VALUES {rows}"
    pair.on_master(f"CREATE DATABASE {db}", ddl, utc, load)
    monkeypatch.setenv("TZ", "America/New_York")  # the target's system time zone
    target = MariaDBServer(free_port(), tmp_path / "target", extra=list(OTHER_SETTINGS)).start()
    try:
        # `ts = ts`: the first TIMESTAMP is ON UPDATE CURRENT_TIMESTAMP there (explicit_defaults_for_timestamp)
        target.execute(f"CREATE DATABASE {db}", ddl, utc, load, f"UPDATE {db}.Orders SET v = 0, ts = ts WHERE id = 2")
        # the target's own session time zone (+05:30): the same clock text is another instant
        target.execute(f"UPDATE {db}.Orders SET ts = '2024-03-10 07:30:00' WHERE id = 1")
        assert target.execute(f"SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{db}'") == [
            ("orders",)
        ]
        target_url = target.create_auditor()
        runs = [
            audit_tables(None, pair.master_url, target_url, [f"{db}.Orders"], FAST, check_replication=False),
            audit_tables(None, target_url, pair.master_url, [f"{db.lower()}.orders"], FAST, check_replication=False),
            audit_tables(None, pair.master_url, target_url, None, FAST, check_replication=False),
        ]
    finally:
        target.stop()
    for run in runs:
        found = [(f.category, f.evidence["table"], f.key, f.evidence.get("columns")) for f in run.findings]
        found = [f for f in found if db in f[1] and f[0] != "schema_mismatch"]
        assert found == [
            ("row_mismatch", f"{db}.Orders", b"[1]", ["ts"]),
            ("row_mismatch", f"{db}.Orders", b"[2]", ["v"]),
        ]
