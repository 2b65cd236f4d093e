"""Keyspace diff: a full outer join of two key snapshots by (db, key), as small DataFrame transforms.

Each transform is `DataFrame -> DataFrame`, testable on a handful of rows (chispa style). The result
of :func:`classify` holds one row per key with a `category` (null when both sides agree); the caller
keeps the non-null rows as recheck candidates and aggregates the rest into coverage metrics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

VALUE_COLUMNS = ("type", "ttl_ms", "expire_at_ms", "length", "digest", "status", "error", "read_at_ms")


def latest_read(snapshot: DataFrame) -> DataFrame:
    """SCAN may return a key twice: keep the later read of each (db, key)."""
    latest = F.max_by(F.struct(*VALUE_COLUMNS), "read_at_ms").alias("v")
    # Shuffling by (db, key) first lets the aggregate and the join reuse one partitioning and sort
    # (measured by bench/diff_bench.py: 10M rows per side went from 93 s to under 60 s).
    grouped = snapshot.repartition("db", "key").groupBy("db", "key").agg(latest, F.count(F.lit(1)).alias("reads"))
    return grouped.select("db", "key", "v.*", "reads")


def _prefixed(df: DataFrame, prefix: str) -> DataFrame:
    return df.select("db", "key", *[F.col(c).alias(f"{prefix}{c}") for c in (*VALUE_COLUMNS, "reads")])


def join_sides(master: DataFrame, replica: DataFrame) -> DataFrame:
    """Full outer join: columns m_* and r_*; a side's columns are null where it lacks the key."""
    return _prefixed(master, "m_").join(_prefixed(replica, "r_"), on=["db", "key"], how="full_outer")


def _ttl_differs(tolerance_ms: int) -> Column:
    m, r = F.col("m_expire_at_ms"), F.col("r_expire_at_ms")
    one_sided = m.isNull() != r.isNull()
    drift = m.isNotNull() & r.isNotNull() & (F.abs(m - r) > F.lit(tolerance_ms))
    return one_sided | drift


def classify(joined: DataFrame, ttl_tolerance_ms: int) -> DataFrame:
    """Add `category`: missing_on_replica, extra_on_replica, type_mismatch, value_mismatch, ttl_mismatch.

    Keys unreadable on either side (status error) get no category: they are not compared, and count
    as uncovered in the metrics instead. An `unstable` read is a value_mismatch candidate: the
    recheck re-reads it.
    """
    m_present, r_present = F.col("m_type").isNotNull(), F.col("r_type").isNotNull()
    unreadable = (F.col("m_status") == "error") | (F.col("r_status") == "error")
    value_differs = (
        (F.col("m_digest") != F.col("r_digest"))
        | (F.col("m_length") != F.col("r_length"))
        | (F.col("m_status") == "unstable")
        | (F.col("r_status") == "unstable")
    )
    category = (
        F.when(unreadable, F.lit(None))
        .when(~r_present, F.lit("missing_on_replica"))
        .when(~m_present, F.lit("extra_on_replica"))
        .when(F.col("m_type") != F.col("r_type"), F.lit("type_mismatch"))
        .when(value_differs, F.lit("value_mismatch"))
        .when(_ttl_differs(ttl_tolerance_ms), F.lit("ttl_mismatch"))
    )
    return joined.withColumn("category", category).withColumn("unreadable", unreadable)


def coverage_aggregates() -> list[Column]:
    """Keys per side, keys compared, keys unreadable, duplicate SCAN reads, candidates."""
    m_present, r_present = F.col("m_type").isNotNull(), F.col("r_type").isNotNull()
    return [
        F.count_if(m_present).alias("master_keys"),
        F.count_if(r_present).alias("replica_keys"),
        F.count_if(m_present & r_present & ~F.col("unreadable")).alias("keys_compared"),
        F.count_if(F.col("m_status") == "error").alias("master_keys_unreadable"),
        F.count_if(F.col("r_status") == "error").alias("replica_keys_unreadable"),
        F.coalesce(F.sum(F.col("m_reads") - 1), F.lit(0)).alias("master_scan_duplicates"),
        F.coalesce(F.sum(F.col("r_reads") - 1), F.lit(0)).alias("replica_scan_duplicates"),
        F.count_if(F.col("category").isNotNull()).alias("candidates"),
    ]


def coverage_metrics(classified: DataFrame) -> DataFrame:
    """The coverage aggregates as a one-row DataFrame."""
    return classified.agg(*coverage_aggregates())


def candidates(classified: DataFrame) -> DataFrame:
    return classified.where(F.col("category").isNotNull()).drop("unreadable")


def diff_snapshots(
    spark: SparkSession, master_path: str, replica_path: str, candidates_path: str, ttl_tolerance_ms: int
) -> dict[str, int]:
    """The keyspace diff job: write the candidates, return the coverage counts.

    One pass: the counts are observed while the candidates are written, instead of caching the joined
    table for a second job (the cache cost more than the join itself; bench/diff_bench.py).
    """
    from pyspark.sql import Observation

    sides = [latest_read(spark.read.parquet(p)) for p in (master_path, replica_path)]
    classified = classify(join_sides(*sides), ttl_tolerance_ms)
    coverage = Observation("coverage")
    candidates(classified.observe(coverage, *coverage_aggregates())).write.mode("overwrite").parquet(candidates_path)
    return {k: int(v or 0) for k, v in coverage.get.items()}
