"""Kind mysql, row audit, on a real MariaDB pair: the edges a DBA meets after a migration or in a
scheduled audit (rows over max_allowed_packet, keys equal under the collation, a replica that stops
during the recheck, a table altered before its recheck, per-server grants, non-ASCII passwords)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.errors import SourceError
from audit.local.mariadb_server import mariadb_available
from audit.sources.mysql.engine import audit_tables
from tests.integration.mysql_pair import FAST, Pair, start_module_pair, statements

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not mariadb_available(), reason="mariadbd not installed (apt-get install mariadb-server)"),
]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    yield from start_module_pair(tmp_path_factory.mktemp("mysql-edges"))


@pytest.fixture()
def schema(pair: Pair) -> str:
    return pair.new_schema()


def test_a_row_longer_than_max_allowed_packet_is_still_compared(pair: Pair, schema: str) -> None:
    """Two 600 KB texts make a 1.2 MB row text: over a 1 MiB max_allowed_packet, CONCAT_WS was NULL on
    both sides, the NULL hash summed as nothing, and a changed byte in such a row was never seen."""
    pair.on_master(
        f"CREATE TABLE {schema}.big (id INT PRIMARY KEY, a LONGTEXT, b LONGBLOB)",
        f"INSERT INTO {schema}.big SELECT seq, REPEAT('a', 600000), REPEAT('b', 600000) FROM {schema}.seq_1_to_3",
    )
    pair.on_replica_only(f"UPDATE {schema}.big SET b = INSERT(b, 5000, 1, 'Z') WHERE id = 2")
    packets = [int(s.execute("SELECT @@GLOBAL.max_allowed_packet")[0][0]) for s in (pair.master, pair.replica)]
    for server in (pair.master, pair.replica):
        server.execute("SET GLOBAL max_allowed_packet = 1048576")  # read by the auditor's new sessions
    try:
        result = pair.audit([f"{schema}.big"])
    finally:
        for server, packet in zip((pair.master, pair.replica), packets, strict=True):
            server.execute(f"SET GLOBAL max_allowed_packet = {packet}")
    assert [(f.category, f.key, f.evidence["columns"]) for f in result.findings] == [("row_mismatch", b"[2]", ["b"])]
    assert not result.tables[0]["equal"]


def test_repair_plan_keeps_rows_whose_keys_differ_only_in_case_or_trailing_spaces(
    pair: Pair, schema: str, tmp_path: Path
) -> None:
    """'A' and 'b ' on the replica are the master's 'a' and 'b' under the column's collation: each is one
    row_mismatch in k (it was a missing_row and an extra_row), and the plan's UPDATE respells it."""
    pair.on_master(
        f"CREATE TABLE {schema}.ci (k VARCHAR(10) PRIMARY KEY, v INT) COLLATE utf8mb4_general_ci",
        f"INSERT INTO {schema}.ci VALUES ('a', 1), ('b', 2), ('c', 3)",
    )
    pair.on_replica_only(
        f"UPDATE {schema}.ci SET k = 'A' WHERE k = 'a'", f"UPDATE {schema}.ci SET k = 'b ' WHERE k = 'b'"
    )
    first = pair.audit([f"{schema}.ci"], repair_path=tmp_path / "fix.sql")
    assert sorted((f.category, f.key, f.evidence["values"]) for f in first.findings) == [
        ("row_mismatch", b'["a"]', {"k": {"master": "a", "replica": "A"}}),
        ("row_mismatch", b'["b"]', {"k": {"master": "b", "replica": "b "}}),
    ]

    pair.replica.execute("SET SESSION sql_log_bin = 0", *statements(tmp_path / "fix.sql"))

    assert pair.replica.execute(f"SELECT HEX(k), v FROM {schema}.ci ORDER BY v") == [("61", 1), ("62", 2), ("63", 3)]
    assert pair.audit([f"{schema}.ci"]).findings == []


def test_keys_differing_only_in_case_or_trailing_spaces_are_each_one_row_mismatch(pair: Pair, schema: str) -> None:
    """600 keys spelt otherwise on the replica, in one range of 1000 rows: the master's keys and the
    replica's come in separate fetches (500 keys each), and each row is reported once, by the master's
    key (they were 600 missing_row and 600 extra_row findings)."""
    pair.on_master(
        f"CREATE TABLE {schema}.ci (k VARCHAR(10) PRIMARY KEY, v INT) COLLATE utf8mb4_general_ci",
        f"INSERT INTO {schema}.ci SELECT CONCAT('k', LPAD(seq, 4, '0')), seq FROM {schema}.seq_1_to_1000",
    )
    pair.on_replica_only(f"UPDATE {schema}.ci SET k = IF(v % 2, UPPER(k), CONCAT(k, ' ')) WHERE v <= 600")
    one_range = FAST.model_copy(update={"fetch_rows": 2000, "min_chunk_rows": 1000, "max_chunk_rows": 1000})

    result = pair.audit([f"{schema}.ci"], one_range)

    assert (result.tables[0]["master_rows"], result.tables[0]["replica_rows"]) == (1000, 1000)
    found = sorted((f.category, f.key, f.evidence["columns"]) for f in result.findings)
    assert found == [("row_mismatch", f'["k{n:04}"]'.encode(), ["k"]) for n in range(1, 601)]
    assert result.findings[0].evidence["values"]["k"]["replica"] in ("K0001", "k0002 ")


@pytest.mark.parametrize(
    ("master", "replica"), [("utf8mb4_general_ci", "utf8mb4_bin"), ("utf8mb4_bin", "utf8mb4_general_ci")]
)
def test_a_key_whose_collation_differs_between_the_sides_is_compared_once_per_row(
    pair: Pair, schema: str, tmp_path: Path, master: str, replica: str
) -> None:
    """The master's chunk bounds, in its collation, cut the replica's rows in another order: replica rows
    fell into several chunks (733 counted for 600) and a changed row was reported three times. The
    sides agree on no collation, so rows are matched byte for byte: the replica's 'kx0010' is not the
    master's 'KX0010'. The plan deletes it before writing 'KX0010' (a general_ci replica would take
    the INSERT for its row, then delete that)."""
    keys = "CONCAT(IF(seq % 3, 'K', 'k'), IF(seq % 5, 'x', 'X'), LPAD(seq, 4, '0'))"  # the two orders differ
    pair.on_master(
        f"CREATE TABLE {schema}.t (k VARCHAR(20) PRIMARY KEY, v INT) COLLATE {master}",
        f"INSERT INTO {schema}.t SELECT {keys}, seq FROM {schema}.seq_1_to_600",
    )
    pair.on_replica_only(
        f"ALTER TABLE {schema}.t MODIFY k VARCHAR(20) COLLATE {replica} NOT NULL",
        f"UPDATE {schema}.t SET v = -1 WHERE v = 300",
        f"DELETE FROM {schema}.t WHERE v = 7",
        f"INSERT INTO {schema}.t VALUES ('kx9999', 9999)",
        f"UPDATE {schema}.t SET k = LOWER(k) WHERE v = 10",
    )

    result = pair.audit([f"{schema}.t"], repair_path=tmp_path / "fix.sql")

    table = result.tables[0]
    assert (table["master_rows"], table["replica_rows"], table["chunks"]) == (600, 600, 1)
    assert sorted((f.category, f.key or b"") for f in result.findings) == [
        ("extra_row", b'["kx0010"]'),
        ("extra_row", b'["kx9999"]'),
        ("missing_row", b'["KX0010"]'),
        ("missing_row", b'["Kx0007"]'),
        ("row_mismatch", b'["kX0300"]'),
        ("schema_mismatch", b""),
    ]
    mismatch = next(f for f in result.findings if f.category == "schema_mismatch")
    assert mismatch.evidence["compared"].startswith("by key digests")

    pair.replica.execute("SET SESSION sql_log_bin = 0", *statements(tmp_path / "fix.sql"))
    again = pair.audit([f"{schema}.t"])
    assert [f.category for f in again.findings] == ["schema_mismatch"] and again.tables[0]["equal"]


def test_repair_plan_of_a_keyless_table_deletes_the_surplus_copy_not_its_case_or_space_twin(
    pair: Pair, schema: str, tmp_path: Path
) -> None:
    """The replica has a surplus 'x' and 'y' beside 'X' and 'y ', which the master has too: under the
    column's collation the surplus copies' DELETE ... LIMIT 1 matched the twins first and removed them."""
    pair.on_master(
        f"CREATE TABLE {schema}.bag (v VARCHAR(10), n INT) COLLATE utf8mb4_general_ci",
        f"INSERT INTO {schema}.bag VALUES ('X', 1), ('x', 1), ('y ', 2), ('y', 2)",
    )
    pair.on_replica_only(f"INSERT INTO {schema}.bag VALUES ('x', 1), ('y', 2)")
    first = pair.audit([f"{schema}.bag"], repair_path=tmp_path / "fix.sql")
    assert sorted(f.category for f in first.findings) == ["extra_row", "extra_row"]

    pair.replica.execute("SET SESSION sql_log_bin = 0", *statements(tmp_path / "fix.sql"))

    left = f"SELECT HEX(v), COUNT(*) FROM {schema}.bag GROUP BY HEX(v) ORDER BY 1"
    assert pair.replica.execute(left) == pair.master.execute(left)
    assert pair.audit([f"{schema}.bag"]).findings == []


def test_recheck_judges_no_row_the_replica_has_not_applied(pair: Pair, schema: str) -> None:
    """Candidates from the chunk compare, re-read while the replica's SQL thread is stopped and the
    master has since written them: the replica's stale rows used to be findings (a row_mismatch, and an
    extra_row whose repair DELETE would later break replication), though its wait had timed out."""
    from audit.local.mariadb_server import wait_link_up
    from audit.sources.mysql import catalog
    from audit.sources.mysql.chunks import Sides, TableWork
    from audit.sources.mysql.client import connect_pair
    from audit.sources.mysql.endpoint import MySQLEndpoint
    from audit.sources.mysql.row_diff import RowDiff
    from audit.sources.mysql.rows import recheck

    pair.on_master(
        f"CREATE TABLE {schema}.k (id INT PRIMARY KEY, v INT)",
        f"INSERT INTO {schema}.k SELECT seq, seq FROM {schema}.seq_1_to_100",
        f"CREATE TABLE {schema}.bag (v INT)",
        f"INSERT INTO {schema}.bag SELECT seq FROM {schema}.seq_1_to_100",
    )
    ends = (MySQLEndpoint.from_url(pair.master_url), MySQLEndpoint.from_url(pair.replica_url))
    sides = Sides(*connect_pair(*ends))
    names = [(schema, "k"), (schema, "bag")]
    plans, _ = catalog.compare_catalogs(
        names, catalog.load_definitions(sides.master, names, {}), catalog.load_definitions(sides.replica, names, {})
    )
    settings = FAST.model_copy(update={"gtid_wait_s": 0.3, "recheck_rounds": 2})
    pair.replica.execute("STOP SLAVE SQL_THREAD")
    try:
        pair.master.execute(
            f"UPDATE {schema}.k SET v = -7 WHERE id = 7",
            f"DELETE FROM {schema}.k WHERE id = 8",
            f"UPDATE {schema}.bag SET v = -7 WHERE v = 7",
        )
        keyless = TableWork(sides, plans[1], 1, settings, check_replication=False)
        keyless.open_snapshots()
        candidates = [
            *keyless.multiset(),
            RowDiff(0, (7,), None, None, None, None),
            RowDiff(0, (8,), None, None, None, None),
        ]
        keyless.close_snapshots()
        assert len(candidates) == 4
        result = recheck(sides, plans, candidates, settings, check_replication=True)
    finally:
        sides.close()
        pair.replica.execute("START SLAVE SQL_THREAD")
        wait_link_up(pair.replica)
    assert result.persisting == [] and result.in_flight == []
    assert sorted(d.key or () for d in result.behind) == [(), (), (7,), (8,)]


def test_a_differing_chunk_whose_rows_no_lookup_finds_is_uncovered_not_equal(
    pair: Pair, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A differing row whose key lookup reads no row on either side (as MariaDB's row IN did for a
    latin1 'é') was taken for equal: the table's digests differed, and there was no finding and nothing
    uncovered, exit 0. Such a chunk is now uncovered, with its rows, which the gate fails."""
    from audit.sources.mysql.chunks import TableWork

    pair.on_master(
        f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, v INT)",
        f"INSERT INTO {schema}.t SELECT seq, seq FROM {schema}.seq_1_to_100",
    )
    pair.on_replica_only(f"UPDATE {schema}.t SET v = 0 WHERE id = 5")
    monkeypatch.setattr(TableWork, "rows_by_key", lambda self, side, keys, _=None: {})

    result = pair.audit([f"{schema}.t"])

    assert result.findings == [] and not result.tables[0]["equal"]
    assert [(u["table"], u["rows"]) for u in result.uncovered] == [(f"{schema}.t", 50)]  # its chunk
    assert "no row read by key differed" in result.uncovered[0]["reason"]
    assert result.metrics["chunks_uncovered"] == 1 and result.metrics["chunks_different"] == 0


def test_table_altered_before_its_recheck_or_its_planning_is_uncovered_not_a_crash(
    pair: Pair, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A column dropped between the chunk compare and the recheck (or a table dropped between listing
    and planning) raised TableGone out of the audit: the pair ended in exit 3 and the other tables'
    findings were lost, where the doc promises an uncovered table, not a crash."""
    import audit.sources.mysql.engine as engine
    from audit.sources.mysql import catalog
    from audit.sources.mysql.client import connect_pair
    from audit.sources.mysql.endpoint import MySQLEndpoint
    from audit.sources.mysql.spark_job import plan_segments

    for t in ("moving", "still"):
        pair.on_master(
            f"CREATE TABLE {schema}.{t} (id INT PRIMARY KEY, v INT)",
            f"INSERT INTO {schema}.{t} SELECT seq, seq FROM {schema}.seq_1_to_100",
        )
        pair.on_replica_only(f"UPDATE {schema}.{t} SET v = 0 WHERE id = 5")
    real = engine.recheck

    def altered_first(*args: Any, **kwargs: Any) -> Any:
        pair.on_master(f"ALTER TABLE {schema}.moving DROP COLUMN v")
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "recheck", altered_first)
    result = pair.audit([f"{schema}.*"])
    assert [(f.evidence["table"], f.key) for f in result.findings] == [(f"{schema}.still", b"[5]")]
    assert [u["table"] for u in result.uncovered] == [f"{schema}.moving"]
    assert "altered during the audit" in result.uncovered[0]["reason"]

    master, replica = connect_pair(MySQLEndpoint.from_url(pair.master_url), MySQLEndpoint.from_url(pair.replica_url))
    try:
        names = [(schema, "still")]
        defs = catalog.load_definitions(master, names, {}), catalog.load_definitions(replica, names, {})
        plans, _ = catalog.compare_catalogs(names, *defs)
        pair.on_master(f"DROP TABLE {schema}.still")
        assert len(plan_segments(master, replica, plans, 1, FAST)) == 1
    finally:
        master.close()
        replica.close()


def test_a_password_with_non_ascii_and_url_special_characters_is_accepted(pair: Pair, schema: str) -> None:
    """pymysql sends a str password as latin-1: 'é' was 'access denied' (exit 3), an emoji a traceback."""
    from urllib.parse import quote

    pair.on_master(f"CREATE TABLE {schema}.t (id INT PRIMARY KEY)", f"INSERT INTO {schema}.t VALUES (1)")
    password = "pé😀@:/%#?+ x"
    for server in (pair.master, pair.replica):
        server.create_auditor("unicode_pw", password)  # its URL is not percent-encoded: built below
    urls = [f"mysql://unicode_pw:{quote(password, safe='')}@127.0.0.1:{s.port}" for s in (pair.master, pair.replica)]
    result = audit_tables(None, *urls, [f"{schema}.t"], FAST)
    assert result.findings == [] and result.metrics["master_rows"] == 1


def test_a_table_the_auditor_may_read_on_one_side_only_is_not_called_missing(pair: Pair, schema: str) -> None:
    """Grants are per server: a table hidden from the auditor on the replica was a missing_table finding."""
    pair.on_master(
        f"CREATE TABLE {schema}.pub (id INT PRIMARY KEY)", f"CREATE TABLE {schema}.secret (id INT PRIMARY KEY)"
    )
    urls = []
    for server, tables in ((pair.master, ("pub", "secret")), (pair.replica, ("pub",))):
        urls.append(server.create_auditor("half", grants=("SLAVE MONITOR",)))
        server.execute("SET SESSION sql_log_bin = 0", *(f"GRANT SELECT ON {schema}.{t} TO half@'%'" for t in tables))
    with pytest.raises(SourceError, match=rf"replica .*lacks the SELECT privilege on `{schema}`.`secret`"):
        audit_tables(None, *urls, [f"{schema}.*"], FAST)
    pair.on_master(f"DROP TABLE {schema}.secret")
    pair.on_replica_only(f"CREATE TABLE {schema}.secret (id INT PRIMARY KEY)")  # really on one side only
    found = audit_tables(None, pair.master_url, pair.replica_url, [f"{schema}.*"], FAST).findings
    assert [(f.category, f.evidence["table"]) for f in found] == [("extra_table", f"{schema}.secret")]


def test_keys_equal_under_one_collation_match_when_the_replica_orders_its_key_otherwise(
    pair: Pair, schema: str
) -> None:
    """The replica's primary key over the same columns in another order (b, a): compared by key digests,
    without ranges, but both sides still share the key's collation, so the replica's 'K0010X' or
    'k0011x ' is the master's row 'k0010x' / 'k0011x' spelt otherwise: one row_mismatch each, as with
    key ranges (docs/mysql.md, "Keys equal under their collation"). They were a missing_row and an
    extra_row each (found by the random differential test, tests/mysql_oracle.py)."""
    pair.on_master(
        f"CREATE TABLE {schema}.ro (a INT, k VARCHAR(20), v INT, PRIMARY KEY (a, k)) COLLATE utf8mb4_general_ci",
        f"INSERT INTO {schema}.ro SELECT seq % 7, CONCAT('k', LPAD(seq, 4, '0'), 'x'), seq FROM {schema}.seq_0_to_299",
    )
    pair.on_replica_only(
        f"ALTER TABLE {schema}.ro DROP PRIMARY KEY, ADD PRIMARY KEY (k, a)",
        f"UPDATE {schema}.ro SET k = 'K0010X' WHERE v = 10",
        f"UPDATE {schema}.ro SET k = 'k0011x ' WHERE v = 11",
        f"UPDATE {schema}.ro SET v = -12 WHERE v = 12",
    )

    result = pair.audit([f"{schema}.ro"])

    found = sorted((f.category, f.key, f.evidence.get("columns")) for f in result.findings)
    assert found == [
        ("row_mismatch", b'[3, "k0010x"]', ["k"]),
        ("row_mismatch", b'[4, "k0011x"]', ["k"]),
        ("row_mismatch", b'[5, "k0012x"]', ["v"]),
        ("schema_mismatch", None, []),
    ]


def test_a_sparse_integer_key_is_walked_in_few_chunks(pair: Pair, schema: str) -> None:
    """BIGINT UNSIGNED keys spread over 2^64 (random or hashed ids): each empty chunk doubles the next
    one's step, so any gap is crossed in some 64 chunks. The step was capped at max_chunk_rows / 1e-12
    key units: 46000 chunks (30 s) here for 300 rows under max_chunk_rows 400, 370000 under 50
    (found by the random differential test, tests/mysql_oracle.py)."""
    ids = [0, 2**63, 2**64 - 1] + [2**64 - 1 - 7 * i for i in range(1, 298)]
    pair.on_master(
        f"CREATE TABLE {schema}.sparse (id BIGINT UNSIGNED PRIMARY KEY, v INT)",
        f"INSERT INTO {schema}.sparse VALUES " + ", ".join(f"({i}, 1)" for i in ids),
    )
    pair.on_replica_only(f"UPDATE {schema}.sparse SET v = 2 WHERE id = {2**63}")

    result = pair.audit([f"{schema}.sparse"])

    assert [(f.category, f.key) for f in result.findings] == [("row_mismatch", f"[{2**63}]".encode())]
    assert result.metrics["rows_compared"] == 300
    assert result.metrics["chunks"] < 400


def test_a_dense_run_of_keys_after_a_sparse_stretch_is_not_one_oversized_chunk(pair: Pair, schema: str) -> None:
    """Integer keys are stepped by value, the step from a density: the table's average for the first
    chunk (3,000 ids in 2-6000 and 3,000 from 1,000,000: 0.006 rows per unit) stepped over all the low
    ids at once, one chunk of 3,000 rows under max_chunk_rows 150 (found by the parallel-replication
    tests' writers). Where the density is a guess the step is cut at the master's key `target` rows on."""
    pair.on_master(
        f"CREATE TABLE {schema}.skew (id INT PRIMARY KEY, v INT)",
        f"INSERT INTO {schema}.skew SELECT seq * 2, seq FROM {schema}.seq_1_to_3000",
        f"INSERT INTO {schema}.skew SELECT 1000000 + seq, seq FROM {schema}.seq_1_to_3000",
    )
    pair.on_replica_only(f"UPDATE {schema}.skew SET v = -1 WHERE id IN (4000, 1002500)")

    result = pair.audit([f"{schema}.skew"], FAST.model_copy(update={"max_chunk_rows": 150}))

    assert sorted(f.key for f in result.findings) == [b"[1002500]", b"[4000]"]
    assert result.metrics["rows_compared"] == 6000
    assert result.metrics["largest_chunk_rows"] <= 150, result.metrics["largest_chunk_rows"]
    assert result.metrics["chunks"] < 200  # the empty stretch between the runs crossed in a few chunks


def test_a_key_the_replica_has_no_index_on_is_not_chunked_into_a_scan_per_chunk(pair: Pair, schema: str) -> None:
    """A target created without the primary key: each chunk's range was a full scan of the replica's
    table (a 200k-row table read 80M rows); the table is compared as a multiset instead, in one pass."""
    pair.on_master(
        f"CREATE TABLE {schema}.nopk (id INT PRIMARY KEY, v INT)",
        f"INSERT INTO {schema}.nopk SELECT seq, seq FROM {schema}.seq_1_to_20000",
    )
    pair.on_replica_only(f"ALTER TABLE {schema}.nopk DROP PRIMARY KEY", f"UPDATE {schema}.nopk SET v = 0 WHERE id = 77")

    def scanned() -> int:
        return int(pair.replica.execute("SHOW GLOBAL STATUS LIKE 'Handler_read_rnd_next'")[0][1])

    before = scanned()
    result = pair.audit([f"{schema}.nopk"])
    # a constant number of passes (checksum, copies per hash, rows; again in each recheck round), not one
    # per chunk: 64 passes (1.28M rows) here before, and quadratic in the table size
    assert scanned() - before < 20 * 20000
    assert result.counts == {"schema_mismatch": 1, "missing_row": 1, "extra_row": 1}
    assert {f.evidence.get("row", {}).get("v") for f in result.findings if f.category != "schema_mismatch"} == {77, 0}


def test_rows_beyond_recheck_max_rows_are_not_held_in_memory(pair: Pair, schema: str, tmp_path: Path) -> None:
    """A table the replica lacks every row of (a migration that skipped it): each missing row beyond
    recheck_max_rows was held, whole, until the end (300k rows of 200 bytes: 340 MB; more: an OOM kill)."""
    import tracemalloc

    pair.on_master(
        f"CREATE TABLE {schema}.skipped (id INT PRIMARY KEY, v VARCHAR(200))",
        f"INSERT INTO {schema}.skipped SELECT seq, REPEAT('x', 200) FROM {schema}.seq_1_to_20000",
    )
    pair.on_replica_only(f"DELETE FROM {schema}.skipped")
    settings = FAST.model_copy(update={"recheck_max_rows": 100, "max_chunk_rows": 5000})
    delivered: list[int] = []
    tracemalloc.start()
    try:
        result = pair.audit(
            [f"{schema}.skipped"], settings, on_findings=lambda fs: delivered.append(len(fs)), work_dir=tmp_path
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sum(delivered) == 20000 and result.counts == {"missing_row": 20000}
    assert result.metrics["rows_unrechecked"] == 19900 and result.repair_statements == 20000
    assert peak < 12_000_000, peak  # a batch of findings at a time (10k), not every row


def test_an_errant_write_stays_errant_after_the_master_passes_its_seq(pair: Pair, schema: str) -> None:
    """A replica without log_slave_updates binlogs only its own writes; once it had applied the master's
    later transactions of the domain, its errant GTID (0-2-N, N below the master's seq) was no longer
    reported, though the write is still there."""
    from audit.local.mariadb_server import wait_in_sync
    from audit.sources.mysql.replication import replication_findings

    pair.on_master(f"CREATE TABLE {schema}.t (id INT PRIMARY KEY)")
    pair.replica.execute(f"INSERT INTO {schema}.t VALUES (9000)")  # binlogged on the replica: errant
    errant_gtid = pair.replica.execute("SELECT @@gtid_binlog_pos")[0][0]
    pair.master.execute(*(f"INSERT INTO {schema}.t VALUES ({i})" for i in range(1, 4)))
    wait_in_sync(pair.master, pair.replica)
    result = replication_findings(pair.master_url, pair.replica_url, FAST)
    errant = [(f.start, f.end) for f in result.findings if f.category == "errant_gtid"]
    assert errant_gtid.startswith("0-2-") and (errant_gtid, errant_gtid) in errant


def test_a_generated_column_whose_expression_differs_is_a_schema_mismatch(pair: Pair, schema: str) -> None:
    """Generated columns are left out of the row compare; their definitions compared only type and the
    'generated' flag, so a replica computing `qty * price * 2` held other totals and the audit passed."""
    pair.on_master(
        f"CREATE TABLE {schema}.g (id INT PRIMARY KEY, qty INT, price DECIMAL(10,2), "
        "total DECIMAL(12,2) AS (qty * price) STORED, half DECIMAL(12,2) AS (price / 2) VIRTUAL)",
        f"INSERT INTO {schema}.g (id, qty, price) SELECT seq, seq, 1.50 FROM {schema}.seq_1_to_50",
    )
    assert pair.audit([f"{schema}.g"]).findings == []  # the same expressions: nothing to report
    pair.on_replica_only(f"ALTER TABLE {schema}.g MODIFY total DECIMAL(12,2) AS (qty * price * 2) STORED")
    (finding,) = pair.audit([f"{schema}.g"]).findings
    assert (finding.category, finding.evidence["columns"]) == ("schema_mismatch", ["total"])
    assert finding.evidence["definitions"]["total"]["replica"]["expression"] == "`qty` * `price` * 2"


def test_columns_named_like_the_auditors_aliases_do_not_hide_differences(pair: Pair, schema: str) -> None:
    """The copies per row hash were `GROUP BY h` and the key buckets `GROUP BY b`: the server took a
    column of that name for the alias, so a keyless table with a column `h` was grouped by it (a
    changed row hid among its group: no finding), and a table compared by key digests with a column `b`
    read the rows of one bucket only (changed rows elsewhere: no finding)."""
    pair.on_master(
        f"CREATE TABLE {schema}.nokey (h INT, v INT)",
        f"INSERT INTO {schema}.nokey SELECT seq % 5, seq FROM {schema}.seq_1_to_300",
        f"CREATE TABLE {schema}.coll (k VARCHAR(10) PRIMARY KEY, b INT, d INT, v INT) COLLATE utf8mb4_general_ci",
        f"INSERT INTO {schema}.coll SELECT CONCAT('k', seq), 0, 0, seq FROM {schema}.seq_1_to_300",
    )
    pair.on_replica_only(
        f"UPDATE {schema}.nokey SET v = 0 WHERE v = 42",
        f"ALTER TABLE {schema}.coll MODIFY k VARCHAR(10) COLLATE utf8mb4_bin",
        f"UPDATE {schema}.coll SET v = 0 WHERE k IN ('k7', 'k42', 'k250')",
    )
    result = pair.audit([f"{schema}.nokey", f"{schema}.coll"])
    rows = sorted(
        (f.category, f.key, f.evidence.get("row")) for f in result.findings if f.category != "schema_mismatch"
    )
    assert rows == [
        ("extra_row", None, {"h": 2, "v": 0}),
        ("missing_row", None, {"h": 2, "v": 42}),
        ("row_mismatch", b'["k250"]', None),
        ("row_mismatch", b'["k42"]', None),
        ("row_mismatch", b'["k7"]', None),
    ]


def test_a_view_or_a_sequence_named_in_tables_is_refused_as_such_not_said_not_to_exist(pair: Pair, schema: str) -> None:
    from audit.errors import ConfigError

    pair.on_master(
        f"CREATE TABLE {schema}.t (id INT PRIMARY KEY)",
        f"CREATE VIEW {schema}.v AS SELECT id FROM {schema}.t",
        f"CREATE SEQUENCE {schema}.sq",
    )
    with pytest.raises(ConfigError, match=rf"tables\[1\]: {schema}.v is a VIEW on the master: only base tables"):
        pair.audit([f"{schema}.t", f"{schema}.v"])
    with pytest.raises(ConfigError, match=rf"tables\[0\]: {schema}.sq is a SEQUENCE on the master"):
        pair.audit([f"{schema}.sq"])
    assert pair.audit([f"{schema}.*"]).metrics["tables_compared"] == 1  # a glob takes base tables only
