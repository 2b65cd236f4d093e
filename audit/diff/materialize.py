"""Materialise a DataFrame midway through a multi-pass Spark job, so the actions that follow read it instead
of recomputing its whole lineage from the scans (a diff that aligns two logs in several passes).

Where a stage goes depends on where the tasks run:

- a local master (`local`, `local[N]`, `local[*]`, a Spark Connect server on one): the executors are the
  driver's own JVM, so Spark's local checkpoint (blocks in memory, spilled to local disk under pressure) is
  exactly as durable as the job, and it costs one job without the Parquet writer's encoding and commit
  protocol (docs/performance.md, "Pika binlog diff"). The blocks go once the frames are garbage
  collected (Spark's ContextCleaner; a Connect server when its client releases them);
- any cluster: a Parquet directory under the pair's work directory, read back. An executor lost midway
  would take local-checkpoint blocks with it, and Spark cannot recompute them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from audit.diff.spark import local_threads

Stage = Callable[[DataFrame, str], DataFrame]
"""Materialise a DataFrame under a name (unique within one diff) and return the materialised frame."""


def tasks_run_in_driver(master: str) -> bool:
    """Whether a master's tasks run in the driver's JVM: `local`, `local[N]`, `local[*]`; not
    `local-cluster[...]`, whose executors are processes of their own, nor any cluster."""
    return local_threads(master) is not None


def stager(spark: SparkSession, work: Path) -> Stage:
    """The stage function for this session: a local checkpoint in the driver, else Parquet under `work`.
    A Connect client reads its server's master."""
    if tasks_run_in_driver(spark.conf.get("spark.master", None) or ""):
        return _checkpoint
    return lambda df, name: _to_files(spark, df, work / f"{name}.parquet")


def _checkpoint(df: DataFrame, name: str) -> DataFrame:
    return df.localCheckpoint(eager=True)


def _to_files(spark: SparkSession, df: DataFrame, path: Path) -> DataFrame:
    df.write.mode("overwrite").parquet(str(path))
    return spark.read.parquet(str(path))
