"""The Pika binlog diff's alignment (audit/sources/pika/binlog_diff.py) on pairs written byte-exactly where
identical records (an INCR loop) make the content passes ambiguous: what it must still count right."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.pika_scenarios import commands, double_trysync_plan, gap_plan, write_master, write_slave
from tests.pika_spark import diff_binlogs, scan_sides

FILE_SIZE = 64 * 1024
INCR = [b"incr", b"db0:counter"]


def _diff(spark: Any, root: Path, dbs: int) -> tuple[dict[int, dict[str, list[Any]]], dict[int, int]]:
    """Findings per db and category, and the unreplicated records per db."""
    m, s = scan_sides(spark, root)
    diff = diff_binlogs(spark, m, s, root / "work", dbs)
    found: dict[int, dict[str, list[Any]]] = {}
    for r in diff.findings.collect():
        found.setdefault(r["db"], {}).setdefault(r["category"], []).append(r)
    return found, {r["db"]: r["records"] for r in diff.lag.collect()}


def test_a_lagging_slave_whose_log_ends_in_alike_records_is_lag_not_a_gap(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Both logs end in the same INCR loop, the slave 30 records behind, its offsets shifted by a replay (db0)
    # or a gap (db1) earlier on. The slave's last record has no next one yet, nor has the master's: that
    # absence once paired the two last records as "same content, same neighbours", so the master's last
    # record seemed held and the 30 records of lag became a missing_range.
    n, lag = 400, 30
    for db, plan in ((0, double_trysync_plan(n - lag, resume=100, batch=10)), (1, gap_plan(n - lag, 100, 5))):
        cmds = commands(n, db)
        cmds[300:] = [[b"incr", b"db%d:counter" % db]] * (n - 300)
        write_slave(tmp_path / "s", db, write_master(tmp_path / "m", db, cmds, FILE_SIZE), plan, FILE_SIZE)
    found, unreplicated = _diff(spark, tmp_path, 2)
    assert unreplicated == {0: lag, 1: lag}
    assert [r["count"] for r in found[0].pop("duplicate_range")] == [10] and found[0] == {}
    assert [r["count"] for r in found[1].pop("missing_range")] == [5] and found[1] == {}
