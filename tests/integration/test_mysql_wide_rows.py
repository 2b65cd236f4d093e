"""Kind mysql on rows of megabytes (TEXT, BLOB): found as before, with memory under max_fetch_bytes.

Rows used to be fetched whole (up to 500 per fetch, both sides, three reads in the recheck) and kept
whole as candidates: memory was rows x row width, with no byte bound. They are now held with their long
values as digests (budget.py) and only the repair plan re-reads a row whole, one at a time.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.local.mariadb_server import mariadb_available
from audit.sources.mysql.engine import RowsAudit
from tests.integration.mysql_pair import FAST, Pair, start_module_pair, statements

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not mariadb_available(), reason="mariadbd not installed (apt-get install mariadb-server)"),
]

WIDTH = 2 << 20
"""Bytes of each row's BLOB (and as many in its TEXT): under the servers' 16 MiB max_allowed_packet."""
ROW = 2 * WIDTH
BUDGET = 1 << 20
SETTINGS = FAST.model_copy(update={"max_fetch_bytes": BUDGET})


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    yield from start_module_pair(tmp_path_factory.mktemp("mysql-wide"))


@pytest.fixture()
def schema(pair: Pair) -> str:
    return pair.new_schema()


def _wide_table(pair: Pair, schema: str) -> None:
    """40 rows of 2 x 2 MiB; on the replica 4 changed (one byte), 2 missing, 1 extra."""
    pair.on_master(f"CREATE TABLE {schema}.wide (id INT PRIMARY KEY, note VARCHAR(20), body LONGBLOB, doc LONGTEXT)")
    for first in range(1, 41, 5):  # 20 MiB per transaction: the test servers' redo log is small
        pair.on_master(
            f"INSERT INTO {schema}.wide SELECT seq, CONCAT('row ', seq), REPEAT(CHAR(65 + seq % 26), {WIDTH}), "
            f"REPEAT('t', {WIDTH}) FROM {schema}.seq_{first}_to_{first + 4}"
        )
    pair.on_replica_only(
        f"UPDATE {schema}.wide SET body = INSERT(body, 1000000, 1, 'z') WHERE id IN (3, 11)",
        f"UPDATE {schema}.wide SET doc = INSERT(doc, {WIDTH}, 1, 'u') WHERE id = 17",
        f"UPDATE {schema}.wide SET note = 'changed' WHERE id = 29",
        f"DELETE FROM {schema}.wide WHERE id IN (7, 23)",
        f"INSERT INTO {schema}.wide VALUES (41, 'extra', REPEAT('e', {WIDTH}), REPEAT('f', {WIDTH}))",
    )


def _audit_peak(pair: Pair, schema: str, **kw: Any) -> tuple[RowsAudit, int]:
    tracemalloc.start()
    try:
        result = pair.audit([f"{schema}.wide"], SETTINGS, **kw)
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_wide_rows_are_found_with_memory_under_the_budget(pair: Pair, schema: str) -> None:
    """Seven differing rows of 4 MiB: the fetch held both sides' rows whole, the candidates
    and the recheck's three reads again; held as digests, the whole audit stays under the budget."""
    _wide_table(pair, schema)
    result, peak = _audit_peak(pair, schema)
    found = {(f.category, f.key, tuple(f.evidence.get("columns", ()))) for f in result.findings}
    assert found == {
        ("row_mismatch", b"[3]", ("body",)),
        ("row_mismatch", b"[11]", ("body",)),
        ("row_mismatch", b"[17]", ("doc",)),
        ("row_mismatch", b"[29]", ("note",)),
        ("missing_row", b"[7]", ()),
        ("missing_row", b"[23]", ()),
        ("extra_row", b"[41]", ()),
    }
    assert peak < 2 * BUDGET, peak  # measured: 168 MB before, 0.25 MB after
    body = next(f for f in result.findings if f.key == b"[3]").evidence["values"]["body"]  # type: ignore[index]
    assert body["master"].startswith(f"({WIDTH} bytes, md5 ") and body["master"] != body["replica"]


def test_repair_plan_writes_wide_rows_whole_one_at_a_time(pair: Pair, schema: str, tmp_path: Path) -> None:
    """The plan needs the master's values: re-read whole, one row at a time, and right (applied on
    the replica, the next audit finds nothing)."""
    _wide_table(pair, schema)
    result, peak = _audit_peak(pair, schema, repair_path=tmp_path / "fix.sql")
    assert result.repair_statements == 7
    assert peak < 2 * BUDGET + 2.5 * ROW, peak  # one row whole at a time: the driver's packet and its values

    pair.replica.execute("SET SESSION sql_log_bin = 0", *statements(tmp_path / "fix.sql"))

    assert pair.audit([f"{schema}.wide"], SETTINGS).findings == []


def test_keyless_wide_rows_are_repaired_by_digest(pair: Pair, schema: str, tmp_path: Path) -> None:
    """A keyless table's surplus copy is deleted by MD5 and length of its long value, a missing one
    inserted from the master's row re-read by its row hash."""
    pair.on_master(
        f"CREATE TABLE {schema}.wide (note VARCHAR(20), body LONGBLOB)",
        f"INSERT INTO {schema}.wide SELECT CONCAT('row ', seq), REPEAT(CHAR(65 + seq), 100000) "
        f"FROM {schema}.seq_1_to_6",
    )
    pair.on_replica_only(
        f"DELETE FROM {schema}.wide WHERE note = 'row 2'",
        f"INSERT INTO {schema}.wide VALUES ('row 3', REPEAT('D', 100000))",
    )
    first = pair.audit([f"{schema}.wide"], SETTINGS, repair_path=tmp_path / "fix.sql")
    assert sorted(f.category for f in first.findings) == ["extra_row", "missing_row"]
    plan = statements(tmp_path / "fix.sql")
    assert any(s.startswith("DELETE") and "MD5(`body`) = '" in s and "LIMIT 1" in s for s in plan), plan[:-1]

    pair.replica.execute("SET SESSION sql_log_bin = 0", *plan)

    assert pair.audit([f"{schema}.wide"], SETTINGS).findings == []


def test_a_short_value_written_as_a_long_values_digest_text_is_not_that_value(pair: Pair, schema: str) -> None:
    """The row text holds a long value as `md5:<its MD5>`: a short value that reads exactly so hashed as the
    long one, so the replica's forged copy passed as equal. Short values of that form are escaped."""
    pair.on_master(f"CREATE TABLE {schema}.forged (id INT PRIMARY KEY, doc LONGTEXT, bin LONGBLOB)")
    pair.on_master(f"INSERT INTO {schema}.forged VALUES (1, REPEAT('x', 9000), 'b'), (2, 'raw:s', REPEAT('y', 9000))")
    pair.on_replica_only(
        f"UPDATE {schema}.forged SET doc = CONCAT('md5:', MD5(doc)) WHERE id = 1",
        f"UPDATE {schema}.forged SET bin = CONCAT('md5:', MD5(bin)) WHERE id = 2",
    )
    result = pair.audit([f"{schema}.forged"], SETTINGS)
    (table,) = result.tables
    assert table["master_digest"] != table["replica_digest"] and not table["equal"]
    # held rows carry a long value's length too (`md5:<MD5>:<bytes>`): the forged text differs there
    assert {f.key for f in result.findings} == {b"[1]", b"[2]"} and result.uncovered == []


def test_short_values_that_begin_like_a_digest_are_equal_when_equal(pair: Pair, schema: str) -> None:
    pair.on_master(f"CREATE TABLE {schema}.prefixes (id INT PRIMARY KEY, doc TEXT)")
    pair.on_master(f"INSERT INTO {schema}.prefixes VALUES (1, 'md5:abc'), (2, 'raw:md5:abc'), (3, 'raw:'), (4, 'md5')")
    result = pair.audit([f"{schema}.prefixes"], SETTINGS)
    assert result.findings == [] and result.uncovered == [] and result.tables[0]["equal"]
