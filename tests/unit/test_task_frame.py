"""audit/diff/task_frame.py: a row per task, exactly, whatever the count; values and types kept."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from audit.diff.task_frame import one_row_per_task

COLUMNS = (("i", "int"), ("name", "string"), ("start", "long"), ("dbs", "array<int>"), ("last", "boolean"))


def _rows(n: int) -> list[tuple[object, ...]]:
    return [(i, f"f{i}" if i % 3 else None, (1 << 40) + i, [i, i + 1] if i % 2 else [], i == n - 1) for i in range(n)]


@pytest.mark.parametrize("n", [1, 2, 8, 17])
def test_row_i_is_alone_in_partition_i(spark, n: int) -> None:  # type: ignore[no-untyped-def]
    df = one_row_per_task(spark, COLUMNS, _rows(n))
    assert df.rdd.getNumPartitions() == n
    got = df.withColumn("part", F.spark_partition_id()).collect()
    assert sorted((r["part"], r["i"]) for r in got) == [(i, i) for i in range(n)]
    assert sorted(tuple(r)[:5] for r in got) == _rows(n)  # None, a 41-bit long, an empty array: as given


def test_no_rows_is_an_empty_frame_of_the_columns(spark) -> None:  # type: ignore[no-untyped-def]
    df = one_row_per_task(spark, COLUMNS, [])
    assert df.collect() == []
    types = [("i", "int"), ("name", "string"), ("start", "bigint"), ("dbs", "array<int>"), ("last", "boolean")]
    assert [(f.name, f.dataType.simpleString()) for f in df.schema] == types
