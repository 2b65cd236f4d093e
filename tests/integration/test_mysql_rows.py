"""Kind mysql, row audit, on a real MariaDB master and GTID replica started on loopback.

Differences are planted on the replica with sql_log_bin = 0 (so replication stays healthy); the
auditor is a least-privilege account (SELECT + SLAVE MONITOR). One pair serves the whole module;
each test works in its own schema.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.errors import ConfigError, SourceConnectError, SourceError
from audit.findings import Finding
from audit.local.mariadb_server import MariaDBServer, free_port, mariadb_available
from audit.local.redis_server import RedisServer
from audit.sources.mysql.chunks import TableWork
from audit.sources.mysql.engine import audit_tables
from tests.integration.mysql_pair import FAST, Pair, start_module_pair, statements

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not mariadb_available(), reason="mariadbd not installed (apt-get install mariadb-server)"),
]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    yield from start_module_pair(tmp_path_factory.mktemp("mysql-rows"))


@pytest.fixture()
def schema(pair: Pair) -> str:
    return pair.new_schema()


def by_key(findings: list[Finding]) -> dict[bytes | None, Finding]:
    return {f.key: f for f in findings}


# --- every type ------------------------------------------------------------------------------------------

TYPES_DDL = """CREATE TABLE {s}.types (
  id INT PRIMARY KEY, d DECIMAL(20,6), f FLOAT, g DOUBLE, dt DATETIME(6), ts TIMESTAMP(3) NULL,
  j JSON, b BLOB, t VARCHAR(100) CHARACTER SET utf8mb4, bt BIT(10), n VARCHAR(10) NULL,
  e ENUM('a','b'), tm TIME(6), y YEAR, bin BINARY(4), dd DATE, a VARCHAR(10), z VARCHAR(10))"""
TYPES_ROW = (
    "({i}, 12345.678901, 1.2345678, 0.3, '2024-02-29 23:59:59.123456', '2024-01-01 10:00:00.250', "
    "'{{\"a\": {i}, \"b\": [1, null]}}', X'00FF10', '😀 é {i}', b'1010', 'x', 'a', '12:34:56.000001', 2024, "
    "X'01020304', '2024-03-01', 'p#', 'q')"
)
PLANTED = {
    2: ("d", "UPDATE {s}.types SET d = 12345.678902 WHERE id = 2"),
    3: ("f", "UPDATE {s}.types SET f = 1.2345679 WHERE id = 3"),  # same 6-digit text, another float
    4: ("g", "UPDATE {s}.types SET g = 0.30000000000000004e0 WHERE id = 4"),  # one ulp from 0.3
    5: ("dt", "UPDATE {s}.types SET dt = '2024-02-29 23:59:59.123457' WHERE id = 5"),
    6: ("j", 'UPDATE {s}.types SET j = \'{{"a": 6, "b": [1, 2]}}\' WHERE id = 6'),
    7: ("b", "UPDATE {s}.types SET b = X'00FF11' WHERE id = 7"),
    8: ("t", "UPDATE {s}.types SET t = '😃 é 8' WHERE id = 8"),
    9: ("bt", "UPDATE {s}.types SET bt = b'1011' WHERE id = 9"),
    10: ("n", "UPDATE {s}.types SET n = '' WHERE id = 10"),  # NULL on the master
    11: ("n", "UPDATE {s}.types SET n = NULL WHERE id = 11"),
    12: ("ts", "UPDATE {s}.types SET ts = '2024-01-01 10:00:00.251' WHERE id = 12"),
    13: ("bin", "UPDATE {s}.types SET bin = X'01020305' WHERE id = 13"),
    14: ("e", "UPDATE {s}.types SET e = 'b' WHERE id = 14"),
    15: ("tm", "UPDATE {s}.types SET tm = '12:34:56.000002' WHERE id = 15"),
    16: ("a,z", "UPDATE {s}.types SET a = 'p', z = '#q' WHERE id = 16"),  # same CONCAT_WS text
}


def test_every_type_compares_right(pair: Pair, schema: str) -> None:
    rows = ", ".join(TYPES_ROW.format(i=i) for i in range(1, 61))
    pair.on_master(TYPES_DDL.format(s=schema), f"INSERT INTO {schema}.types VALUES {rows}")
    pair.on_master(f"UPDATE {schema}.types SET n = NULL WHERE id = 10")
    pair.on_replica_only(*(sql.format(s=schema) for _, sql in PLANTED.values()))

    result = pair.audit([f"{schema}.types"])

    found = by_key(result.findings)
    assert set(found) == {f"[{i}]".encode() for i in PLANTED}
    for i, (columns, _) in PLANTED.items():
        f = found[f"[{i}]".encode()]
        assert (f.check, f.category) == ("rows", "row_mismatch")
        assert f.evidence["table"] == f"{schema}.types" and f.evidence["columns"] == columns.split(",")
        assert f.evidence["rechecked"] is True and f.master_digest != f.replica_digest
    assert found[b"[3]"].evidence["values"]["f"] == {"master": 1.2345677614212036, "replica": 1.2345678806304932}
    assert found[b"[10]"].evidence["values"]["n"] == {"master": None, "replica": ""}
    assert found[b"[8]"].evidence["values"]["t"] == {"master": "😀 é 8", "replica": "😃 é 8"}
    assert result.metrics["master_rows"] == result.metrics["replica_rows"] == 60
    assert result.metrics["uncovered"] == 0 and result.metrics["chunks"] > 1


# --- keys ------------------------------------------------------------------------------------------------


def test_composite_varchar_binary_and_datetime_keys(pair: Pair, schema: str) -> None:
    pair.on_master(
        f"CREATE TABLE {schema}.orders (code VARCHAR(20), line INT, qty INT, PRIMARY KEY (code, line))",
        f"INSERT INTO {schema}.orders SELECT CONCAT('A-', seq DIV 10), seq MOD 10, seq FROM {schema}.seq_1_to_2000",
        f"CREATE TABLE {schema}.blobs (k VARBINARY(16) PRIMARY KEY, v INT)",
        f"INSERT INTO {schema}.blobs SELECT UNHEX(LPAD(HEX(seq * 7919), 8, '0')), seq FROM {schema}.seq_1_to_1500",
        f"CREATE TABLE {schema}.events (at DATETIME(6) NOT NULL, v INT, UNIQUE KEY at_u (at))",
        f"INSERT INTO {schema}.events SELECT '2024-01-01' + INTERVAL seq * 1001 MICROSECOND, seq "
        f"FROM {schema}.seq_1_to_1500",
    )
    pair.on_replica_only(
        f"DELETE FROM {schema}.orders WHERE code = 'A-17' AND line = 3",
        f"INSERT INTO {schema}.orders VALUES ('Z-1', 1, 0)",
        f"UPDATE {schema}.orders SET qty = -1 WHERE code = 'A-150' AND line = 9",
        f"UPDATE {schema}.blobs SET v = -1 WHERE k = UNHEX(LPAD(HEX(700 * 7919), 8, '0'))",
        f"DELETE FROM {schema}.events WHERE v = 1000",
    )

    result = pair.audit([f"{schema}.*"])

    found = {(f.evidence["table"], f.key): f.category for f in result.findings}
    k700 = "0x" + format(700 * 7919, "08x")
    assert found == {
        (f"{schema}.orders", b'["A-17", 3]'): "missing_row",
        (f"{schema}.orders", b'["Z-1", 1]'): "extra_row",
        (f"{schema}.orders", b'["A-150", 9]'): "row_mismatch",
        (f"{schema}.blobs", f'["{k700}"]'.encode()): "row_mismatch",
        (f"{schema}.events", b'["2024-01-01 00:00:01.001000"]'): "missing_row",
    }
    digests = {t["table"]: t for t in result.tables}
    assert digests[f"{schema}.events"]["key"] == ["at"] and digests[f"{schema}.orders"]["replica_rows"] == 2000


@pytest.mark.timeout(120)
def test_float_and_bit_keys_are_walked_by_their_exact_values(pair: Pair, schema: str) -> None:
    """A chunk's bound was read as the key column's own text: a FLOAT's keeps 6 digits, so 128 keys
    between 100000 and 100001 read back as '100000', below the keys it stood for, and the walk found
    that bound again for ever (the audit never ended); a BIT's is its raw bytes, which decoded to no
    key (the audit stopped). Bounds are now the keys' exact values (a FLOAT as DOUBLE, a BIT as a number)."""
    pair.on_master(
        f"CREATE TABLE {schema}.f (k FLOAT NOT NULL PRIMARY KEY, v INT)",
        f"INSERT INTO {schema}.f SELECT 100000 + seq * 0.0078125, seq FROM {schema}.seq_1_to_1000",
        f"CREATE TABLE {schema}.b (a INT NOT NULL, k BIT(16) NOT NULL, v INT, PRIMARY KEY (a, k))",
        f"INSERT INTO {schema}.b SELECT seq % 3, seq * 97, seq FROM {schema}.seq_1_to_600",
    )
    pair.on_replica_only(*(f"UPDATE {schema}.{t} SET v = -1 WHERE v IN (5, 500)" for t in ("f", "b")))

    result = pair.audit([f"{schema}.f", f"{schema}.b"])

    assert {(f.evidence["table"], f.key) for f in result.findings} == {
        (f"{schema}.b", b"[2, 485]"),
        (f"{schema}.b", b"[2, 48500]"),
        (f"{schema}.f", b"[100000.0390625]"),
        (f"{schema}.f", b"[100003.90625]"),
    } and len(result.findings) == 4
    assert result.metrics["chunks"] > 2 and result.metrics["uncovered"] == 0


def test_non_ascii_keys_and_values_in_legacy_character_sets(pair: Pair, schema: str) -> None:
    """A composite key whose latin1 column holds 'é': MariaDB's `(a, b) IN ((..), (..))` compared it with
    the auditor's utf8mb4 literals byte for byte, so no differing row was read on either side and each
    was taken for equal: the table's digests differed, no finding. A row of latin1 and cp1251 columns
    (one legacy table) made the row text an 'Illegal mix of collations' that stopped the audit."""
    row = "CONCAT('é', seq % 7), CONCAT('д', seq), seq, CONCAT('ü', seq), CONCAT('ж', seq)"
    pair.on_master(
        f"CREATE TABLE {schema}.legacy (a VARCHAR(5) CHARACTER SET latin1 NOT NULL, "
        "b VARCHAR(8) CHARACTER SET latin1 NOT NULL, v INT, PRIMARY KEY (a, b))",
        f"INSERT INTO {schema}.legacy SELECT CONCAT('é', seq % 7), CONCAT('è', seq), seq FROM {schema}.seq_1_to_600",
        f"CREATE TABLE {schema}.mixed (a VARCHAR(5) CHARACTER SET latin1 NOT NULL, b VARCHAR(8) CHARACTER SET "
        "cp1251 NOT NULL, v INT, l VARCHAR(8) CHARACTER SET latin1, c VARCHAR(8) CHARACTER SET cp1251, "
        "PRIMARY KEY (a, b))",
        f"INSERT INTO {schema}.mixed SELECT {row} FROM {schema}.seq_1_to_600",
    )
    pair.on_replica_only(
        *(f"UPDATE {schema}.{t} SET v = -1 WHERE v IN (5, 300)" for t in ("legacy", "mixed")),
        f"UPDATE {schema}.mixed SET c = 'з' WHERE v = 8",
    )

    result = pair.audit([f"{schema}.legacy", f"{schema}.mixed"])

    found = sorted((f.evidence["table"], f.key, f.evidence["columns"]) for f in result.findings)
    assert found == [
        (f"{schema}.legacy", '["é5", "è5"]'.encode(), ["v"]),
        (f"{schema}.legacy", '["é6", "è300"]'.encode(), ["v"]),
        (f"{schema}.mixed", '["é1", "д8"]'.encode(), ["c"]),
        (f"{schema}.mixed", '["é5", "д5"]'.encode(), ["v"]),
        (f"{schema}.mixed", '["é6", "д300"]'.encode(), ["v"]),
    ]


def test_spark_tasks_find_the_same_rows(pair: Pair, schema: str, spark: Any) -> None:
    pair.on_master(
        f"CREATE TABLE {schema}.big (id BIGINT PRIMARY KEY, v VARCHAR(20))",
        f"INSERT INTO {schema}.big SELECT seq * 3, CONCAT('v', seq) FROM {schema}.seq_1_to_3000",
        f"CREATE TABLE {schema}.named (k VARCHAR(12) PRIMARY KEY, v INT)",
        f"INSERT INTO {schema}.named SELECT CONCAT('k', LPAD(seq, 6, '0')), seq FROM {schema}.seq_1_to_3000",
    )
    pair.on_replica_only(
        f"DELETE FROM {schema}.big WHERE id IN (3, 4500, 9000)",
        f"UPDATE {schema}.named SET v = 0 WHERE k IN ('k000001', 'k001500', 'k003000')",
    )
    settings = FAST.model_copy(update={"parallelism": 3, "min_segment_rows": 500})

    in_spark = pair.audit([f"{schema}.*"], settings, spark=spark)
    local = pair.audit([f"{schema}.*"], settings)

    keys = sorted((f.evidence["table"], f.key, f.category) for f in in_spark.findings)
    assert keys == sorted((f.evidence["table"], f.key, f.category) for f in local.findings)
    assert len(keys) == 6 and in_spark.metrics["segments"] == 6
    # chunk sizes follow the measured rate, so only the chunk counts may differ between runs
    assert [{**t, "chunks": 0} for t in in_spark.tables] == [{**t, "chunks": 0} for t in local.tables]


def test_a_table_whose_every_chunk_differs_is_compared_by_the_spark_tasks(
    pair: Pair, schema: str, spark: Any, tmp_path: Path
) -> None:
    pair.on_master(
        f"CREATE TABLE {schema}.half (id INT PRIMARY KEY, v INT)",
        f"INSERT INTO {schema}.half SELECT seq, seq FROM {schema}.seq_1_to_4000",
    )
    pair.on_replica_only(
        f"DELETE FROM {schema}.half WHERE id MOD 2 = 0", f"UPDATE {schema}.half SET v = -1 WHERE id MOD 100 = 1"
    )
    settings = FAST.model_copy(update={"parallelism": 2, "min_segment_rows": 1000})

    result = pair.audit([f"{schema}.half"], settings, spark=spark, repair_path=tmp_path / "fix.sql")

    cats: dict[str, int] = {}
    for f in result.findings:
        cats[f.category] = cats.get(f.category, 0) + 1
    assert cats == {"missing_row": 2000, "row_mismatch": 40}
    assert result.metrics["chunks_different"] == result.metrics["chunks"] > 2 and result.metrics["segments"] == 2
    assert result.repair_statements == 2040 and result.metrics["rows_converged"] == 0


# --- keyless tables, schemas ---------------------------------------------------------------------------------


def test_keyless_table_is_a_multiset(pair: Pair, schema: str) -> None:
    pair.on_master(
        f"CREATE TABLE {schema}.log (msg VARCHAR(20), n INT)",
        f"INSERT INTO {schema}.log VALUES ('dup', 1), ('dup', 1), ('dup', 1), ('one', NULL), ('two', 2)",
    )
    pair.on_replica_only(
        f"DELETE FROM {schema}.log WHERE msg = 'dup' LIMIT 1",
        f"INSERT INTO {schema}.log VALUES ('new', 9), ('new', 9)",
    )

    result = pair.audit([f"{schema}.log"])

    rows = sorted((f.category, f.count, json.dumps(f.evidence["row"])) for f in result.findings)
    assert rows == [("extra_row", 2, '{"msg": "new", "n": 9}'), ("missing_row", 1, '{"msg": "dup", "n": 1}')]
    assert all(f.key is None and (f.master_digest or f.replica_digest) for f in result.findings)
    assert result.tables[0]["key"] is None and result.metrics["tables_keyless"] == 1


def test_missing_extra_tables_and_schema_mismatch(pair: Pair, schema: str) -> None:
    pair.on_master(
        f"CREATE TABLE {schema}.items (id INT PRIMARY KEY, price DECIMAL(9,2), name VARCHAR(20))",
        f"INSERT INTO {schema}.items VALUES (1, 1.50, 'a'), (2, 2.00, 'b'), (3, 3.25, 'c')",
    )
    pair.master.execute("SET SESSION sql_log_bin = 0", f"CREATE TABLE {schema}.only_master (id INT PRIMARY KEY)")
    pair.on_replica_only(
        f"CREATE TABLE {schema}.only_replica (id INT PRIMARY KEY)",
        f"ALTER TABLE {schema}.items MODIFY price DECIMAL(12,4), ADD COLUMN note TEXT",
        f"UPDATE {schema}.items SET name = 'B' WHERE id = 2",
    )

    result = pair.audit([f"{schema}.*"])

    cats = sorted((f.category, f.evidence["table"]) for f in result.findings)
    assert cats == [
        ("extra_table", f"{schema}.only_replica"),
        ("missing_table", f"{schema}.only_master"),
        ("row_mismatch", f"{schema}.items"),
        ("schema_mismatch", f"{schema}.items"),
    ]
    mismatch = next(f for f in result.findings if f.category == "schema_mismatch")
    assert mismatch.evidence["columns"] == ["note", "price"]
    assert mismatch.evidence["definitions"]["price"]["replica"]["type"] == "decimal(12,4)"
    # 1.50 and 1.5000 are the same number: only the planted name differs
    row = next(f for f in result.findings if f.category == "row_mismatch")
    assert row.key == b"[2]" and row.evidence["columns"] == ["name"]


def test_identifiers_and_binary_keys_are_quoted_and_shown_right(pair: Pair, tmp_path: Path) -> None:
    db = "my `shop` é"
    q = "`my ``shop`` é`"
    pair.on_master(
        f"CREATE DATABASE {q}",
        f"CREATE TABLE {q}.`ordres ``1`` ☃` (`clé id` VARBINARY(8), `n°` INT, PRIMARY KEY (`clé id`, `n°`))",
        f"INSERT INTO {q}.`ordres ``1`` ☃` VALUES (X'00FF27', 1), ('é''\\\\', 2), (X'61', 3)",
    )
    pair.on_replica_only(
        f"UPDATE {q}.`ordres ``1`` ☃` SET `n°` = 9 WHERE `n°` = 2",
        f"DELETE FROM {q}.`ordres ``1`` ☃` WHERE `n°` = 1",
    )

    result = pair.audit([f"`{db.replace('`', '``')}`.*"], repair_path=tmp_path / "fix.sql")

    found = sorted((f.category, f.key) for f in result.findings)
    quote_backslash = "0x" + "é'\\".encode().hex()
    assert found == [
        ("extra_row", f'["{quote_backslash}", 9]'.encode()),
        ("missing_row", b'["0x00ff27", 1]'),
        ("missing_row", f'["{quote_backslash}", 2]'.encode()),
    ]
    assert {f.evidence["table"] for f in result.findings} == {f"{db}.ordres `1` ☃"}
    pair.replica.execute("SET SESSION sql_log_bin = 0", *statements(tmp_path / "fix.sql"))
    assert pair.audit([f"`{db.replace('`', '``')}`.*"]).findings == []


# --- repair, writes, privileges --------------------------------------------------------------------------


def test_repair_plan_applied_to_the_replica_makes_a_second_audit_pass(pair: Pair, schema: str, tmp_path: Path) -> None:
    rows = ", ".join(TYPES_ROW.format(i=i) for i in range(1, 31))
    pair.on_master(
        TYPES_DDL.format(s=schema),
        f"INSERT INTO {schema}.types VALUES {rows}",
        f"CREATE TABLE {schema}.log (msg TEXT, n INT)",
        f"INSERT INTO {schema}.log VALUES ('dup', 1), ('dup', 1), ('a\\tb', NULL)",
    )
    pair.on_replica_only(
        *(sql.format(s=schema) for _, sql in PLANTED.values()),
        f"DELETE FROM {schema}.types WHERE id IN (20, 21)",
        f"INSERT INTO {schema}.types (id) VALUES (100)",
        f"DELETE FROM {schema}.log WHERE n IS NULL",
        f"INSERT INTO {schema}.log VALUES ('dup', 1)",
    )
    first = pair.audit([f"{schema}.*"], work_dir=tmp_path, pair="shop-db")
    assert len(first.findings) == len(PLANTED) + 5 and first.repair_path == tmp_path / "repair" / "shop-db.sql"
    assert first.repair_statements == len(PLANTED) + 5

    pair.replica.execute("SET SESSION sql_log_bin = 0", *statements(first.repair_path))

    second = pair.audit([f"{schema}.*"])
    assert second.findings == [] and all(t["equal"] for t in second.tables)
    assert [t["master_digest"] for t in second.tables] == [t["replica_digest"] for t in second.tables]
    assert first.content("master")["digest"] != first.content("replica")["digest"]
    assert second.content("master") == {**second.content("replica")}
    assert second.content("master")["rows_per_table"] == {f"{schema}.log": 3, f"{schema}.types": 30}


def test_post_migration_two_independent_servers(pair: Pair, schema: str, tmp_path: Path) -> None:
    """MariaDB to MariaDB without replication (check_replication false): a copy, then one row changed."""
    target = MariaDBServer(free_port(), tmp_path / "target").start()
    try:
        ddl = f"CREATE TABLE {schema}.c (id INT PRIMARY KEY, v VARCHAR(10))"
        load = f"INSERT INTO {schema}.c SELECT seq, CONCAT('v', seq) FROM {schema}.seq_1_to_300"
        pair.on_master(ddl, load)
        target.execute(f"CREATE DATABASE {schema}", ddl, load, f"UPDATE {schema}.c SET v = 'moved' WHERE id = 42")
        result = audit_tables(
            None, pair.master_url, target.create_auditor(), [f"{schema}.c"], FAST, check_replication=False
        )
    finally:
        target.stop()
    assert [(f.category, f.key) for f in result.findings] == [("row_mismatch", b"[42]")]
    assert result.metrics["rows_compared"] == 300


def test_healthy_pair_under_concurrent_writes_gives_no_findings(pair: Pair, schema: str, spark: Any) -> None:
    pair.on_master(
        f"CREATE TABLE {schema}.hot (id INT PRIMARY KEY, v INT, s VARCHAR(20))",
        f"INSERT INTO {schema}.hot SELECT seq, seq, 'x' FROM {schema}.seq_1_to_3000",
    )
    stop = threading.Event()
    writes = [0]

    def writer() -> None:
        with pair.master.connect(schema, admin=True) as conn, conn.cursor() as cur:
            i = 0
            while not stop.is_set():
                i += 1
                cur.execute("UPDATE hot SET v = v + 1, s = %s WHERE id = %s", (f"w{i}", 1 + (i * 7919) % 3000))
                cur.execute("INSERT INTO hot VALUES (%s, 0, 'new') ON DUPLICATE KEY UPDATE v = 0", (3000 + i,))
                cur.execute("DELETE FROM hot WHERE id = %s", (3000 + i - 5,))
                writes[0] += 3
                time.sleep(0.002)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(0.2)
        settings = FAST.model_copy(update={"parallelism": 2, "min_segment_rows": 1000})
        result = pair.audit([f"{schema}.hot"], settings, spark=spark)
    finally:
        stop.set()
        thread.join()
    assert writes[0] > 100
    assert result.findings == [] and result.metrics["uncovered"] == 0, result.uncovered
    assert result.metrics["chunks"] > 5


def test_lag_makes_no_false_positive(pair: Pair, schema: str) -> None:
    """Writes the replica has not applied yet: waited for when it catches up, uncovered when it cannot."""
    pair.on_master(
        f"CREATE TABLE {schema}.lag (id INT PRIMARY KEY, v INT)",
        f"INSERT INTO {schema}.lag SELECT seq, seq FROM {schema}.seq_1_to_1000",
    )
    with pair.sql_thread_stopped():
        pair.master.execute(f"UPDATE {schema}.lag SET v = -v WHERE id MOD 97 = 0")
        stuck = pair.audit([f"{schema}.lag"], FAST.model_copy(update={"gtid_wait_s": 0.3}))
        assert stuck.findings == [] and stuck.metrics["chunks_uncovered"] >= 1
        assert "had not applied the master's GTID position" in stuck.uncovered[0]["reason"]
        restart = threading.Timer(1.0, lambda: pair.replica.execute("START SLAVE SQL_THREAD"))
        restart.start()
        caught_up = pair.audit([f"{schema}.lag"], FAST.model_copy(update={"gtid_wait_s": 20}))
        restart.join()
    assert caught_up.findings == [] and caught_up.metrics["uncovered"] == 0
    assert caught_up.metrics["chunks_different"] == 0 and all(t["equal"] for t in caught_up.tables)


def test_least_privilege_audit_leaves_the_gtid_positions_alone(pair: Pair, schema: str) -> None:
    from audit.sources.mysql.replication import replication_findings

    pair.on_master(
        f"CREATE TABLE {schema}.p (id INT PRIMARY KEY, v INT)",
        f"INSERT INTO {schema}.p SELECT seq, seq FROM {schema}.seq_1_to_500",
    )
    pair.on_replica_only(f"UPDATE {schema}.p SET v = 0 WHERE id = 250")

    def positions() -> list[Any]:
        m = pair.master.execute("SELECT @@gtid_binlog_pos, @@gtid_binlog_state")[0]
        m_file = pair.master.execute("SHOW MASTER STATUS")[0][:2]
        r = pair.replica.execute("SELECT @@gtid_binlog_pos, @@gtid_slave_pos")[0]
        return [m, m_file, r]

    before = positions()
    rows = pair.audit([f"{schema}.p"])
    replication = replication_findings(pair.master_url, pair.replica_url, FAST)
    assert positions() == before
    assert [f.key for f in rows.findings] == [b"[250]"] and replication.findings == []
    grants = pair.master.execute("SHOW GRANTS FOR auditor@'%'")
    assert [g[0].split(" ON ")[0] for g in grants] == ["GRANT SELECT, SLAVE MONITOR"]


# --- bad input -------------------------------------------------------------------------------------------


def test_unreachable_server_and_bad_password_name_the_host(pair: Pair) -> None:
    port = free_port()
    with pytest.raises(SourceConnectError, match=f"replica 127.0.0.1:{port}: cannot reach the server") as e:
        audit_tables(None, pair.master_url, f"mysql://a:secret-pw@127.0.0.1:{port}?connect_timeout=2", ["x.y"])
    assert e.value.where == f"127.0.0.1:{port}" and "secret-pw" not in str(e.value)
    wrong = f"mysql://auditor:not-the-pw@127.0.0.1:{pair.master.port}"
    with pytest.raises(SourceConnectError, match=f"master 127.0.0.1:{pair.master.port}: access denied for user 'aud"):
        audit_tables(None, wrong, pair.replica_url, ["x.y"])


def test_a_port_where_another_protocol_listens_is_said_without_waiting_the_read_timeout(
    pair: Pair, tmp_path: Path
) -> None:
    """A Redis server says nothing until spoken to: the greeting's wait was the session's read timeout."""
    server = RedisServer(free_port(), tmp_path / "redis").start()
    try:
        started = time.monotonic()
        with pytest.raises(SourceConnectError, match=f"replica 127.0.0.1:{server.port}: no MySQL handshake") as e:
            audit_tables(
                None, pair.master_url, f"mysql://a:secret-pw@127.0.0.1:{server.port}?connect_timeout=2", ["x.y"]
            )
        # the handshake's bound (10 s at least), not the 600 s read timeout
        assert time.monotonic() - started < 120
        assert e.value.where == f"127.0.0.1:{server.port}" and "secret-pw" not in str(e.value)
    finally:
        server.stop()


def test_table_that_does_not_exist_is_a_config_error_naming_it(pair: Pair, schema: str) -> None:
    pair.on_master(f"CREATE TABLE {schema}.real (id INT PRIMARY KEY)")
    with pytest.raises(ConfigError, match=rf"tables\[1\]: {schema}.nope does not exist"):
        pair.audit([f"{schema}.real", f"{schema}.nope"])


def test_table_the_auditor_may_not_read_names_the_privilege(pair: Pair, schema: str) -> None:
    pair.on_master(f"CREATE TABLE {schema}.secret (id INT PRIMARY KEY)")
    urls = [s.create_auditor("narrow", grants=("SLAVE MONITOR",)) for s in (pair.master, pair.replica)]
    with pytest.raises(SourceError, match=rf"lacks the SELECT privilege on `{schema}`.`secret`") as e:
        audit_tables(None, *urls, [f"{schema}.secret"], FAST)
    assert not isinstance(e.value, SourceConnectError) and f"127.0.0.1:{pair.master.port}" in str(e.value)
    with pytest.raises(SourceError, match="no base table visible on master"):
        audit_tables(None, *urls, None, FAST)


def test_table_altered_during_the_audit_is_uncovered_not_a_crash(
    pair: Pair, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pair.on_master(
        f"CREATE TABLE {schema}.moving (id INT PRIMARY KEY, v INT)",
        f"INSERT INTO {schema}.moving SELECT seq, seq FROM {schema}.seq_1_to_1000",
        f"CREATE TABLE {schema}.still (id INT PRIMARY KEY, v INT)",
        f"INSERT INTO {schema}.still SELECT seq, seq FROM {schema}.seq_1_to_100",
    )
    slow = FAST.model_copy(update={"max_rows_per_s": 800, "min_chunk_rows": 100, "max_chunk_rows": 100})
    # altered once the audit has planned the table and read its first chunk (of ten, paced over 1.25 s):
    # a timer of 0.5 s from the call could fire before the plan on a loaded machine (the audit then
    # plans the altered table, and nothing was altered "during" it). From another thread: the ALTER
    # waits for the metadata lock of the chunk's snapshot, which the audit's next chunk releases.
    first_chunk = threading.Event()
    real_chunk = TableWork.chunk

    def chunk(self: TableWork, lower: Any, upper: Any) -> Iterator[Any]:
        yield from real_chunk(self, lower, upper)
        if self.plan.name == "moving":
            first_chunk.set()

    monkeypatch.setattr(TableWork, "chunk", chunk)
    alter = threading.Thread(
        target=lambda: first_chunk.wait(60) and pair.master.execute(f"ALTER TABLE {schema}.moving ADD COLUMN w INT")
    )
    alter.start()
    try:
        result = pair.audit([f"{schema}.*"], slow)
    finally:
        first_chunk.set()  # an audit that never read the table: the ALTER, late, and the asserts fail
        alter.join()
    assert result.findings == []
    moving = next(t for t in result.tables if t["table"] == f"{schema}.moving")
    still = next(t for t in result.tables if t["table"] == f"{schema}.still")
    assert moving["uncovered"] and not moving["equal"] and still["equal"] and not still["uncovered"]
    assert any(u["table"] == f"{schema}.moving" for u in result.uncovered) and result.metrics["uncovered"] >= 1
