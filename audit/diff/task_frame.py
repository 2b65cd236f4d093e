"""A DataFrame of a few rows with exactly one row per partition: one Spark task per row.

The jobs that do their work inside tasks (a file, a connection, a group of ranges: whatever a
`mapInArrow` body handles from one row) need their rows spread one per task. `parallelize(rows, n)`
does that but needs the SparkContext, which a Spark Connect client does not have, and costs a Python
stage; `createDataFrame(rows).repartition(n)` deals rows round-robin from each input partition's
random start, so two rows often share a task while another task gets none (8 rows: 4 tasks of 2).

Here the partitions come from `spark.range(0, n, 1, n)` (n slices of one id each) and each column is
the id-th element of a literal array: a projection, no shuffle, the same plan in classic Spark and
in Spark Connect. Meant for tens to a few thousand rows (the literals travel in the plan).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def one_row_per_task(
    spark: SparkSession, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[object]]
) -> DataFrame:
    """`rows` (values in the order of `columns`: (name, Spark SQL type)) as a DataFrame, row i in partition i.

    Values are what `F.lit` takes: None, numbers, strings, bytes, and lists of them (tuples become lists)."""
    rows = [[list(v) if isinstance(v, tuple) else v for v in row] for row in rows]
    n = len(rows)
    if n == 0:
        return spark.range(0).select(*[F.lit(None).cast(t).alias(name) for name, t in columns])
    position = (F.col("id") + 1).cast("int")
    picked = [
        F.element_at(F.array(*[F.lit(row[j]) for row in rows]), position).cast(t).alias(name)
        for j, (name, t) in enumerate(columns)
    ]
    return spark.range(0, n, 1, n).select(*picked)
