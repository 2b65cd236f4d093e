"""Staging a frame midway through a multi-pass diff (audit/diff/materialize.py): where it goes for each kind
of master, that what comes back holds the same rows, and that a healthy Pika pair stages only what its
alignment needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit.diff.materialize import stager, tasks_run_in_driver
from tests.pika_scenarios import commands, healthy_plan, write_master, write_slave
from tests.pika_spark import scan_sides


@pytest.mark.parametrize(
    ("master", "in_driver"),
    [
        ("local", True),
        ("local[2]", True),
        ("local[*]", True),
        ("local[4,3]", True),
        ("local-cluster[2,1,1024]", False),
        ("spark://10.0.0.5:7077", False),
        ("yarn", False),
        ("k8s://https://10.0.0.1:6443", False),
    ],
)
def test_only_a_local_master_runs_tasks_in_the_driver(master: str, in_driver: bool) -> None:
    assert tasks_run_in_driver(master) is in_driver


def test_a_local_session_checkpoints_in_the_driver_and_writes_no_files(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    df = spark.range(1000).withColumn("sq", F.col("id") * F.col("id"))
    staged = stager(spark, tmp_path)(df, "squares")
    assert sorted(r["sq"] for r in staged.collect()) == [i * i for i in range(1000)]
    assert list(tmp_path.iterdir()) == []


def test_the_cluster_staging_writes_parquet_under_the_work_dir(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from audit.diff.materialize import _to_files

    staged = _to_files(spark, spark.range(500), tmp_path / "ids.parquet")
    assert (tmp_path / "ids.parquet" / "_SUCCESS").exists()
    assert sorted(r["id"] for r in staged.collect()) == list(range(500))


def test_a_healthy_pair_stages_no_pass_after_the_positional_one(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from audit.sources.pika.binlog_check import file_bases, file_ends
    from audit.sources.pika.binlog_diff import binlog_findings

    n = 1200
    log = write_master(tmp_path / "m", 0, commands(n, 0), 64 * 1024)
    write_slave(tmp_path / "s", 0, log, healthy_plan(0, n - 30), 64 * 1024)  # 30 records of lag
    m, s = scan_sides(spark, tmp_path)
    staged: list[str] = []

    def recording(df, name):  # type: ignore[no-untyped-def]
        staged.append(name)
        return df.localCheckpoint(eager=True)

    result = binlog_findings(m, s, 1, file_bases(file_ends(m, s)), recording)
    assert result.findings.count() == 0
    assert [(r["records"]) for r in result.lag.collect()] == [30]
    # the slave's rest is empty after the positional pass: no content pass, no in-place join, no rests again
    assert staged == ["m_good", "s_good", "by_position"]
