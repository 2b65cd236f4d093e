"""Turn keyspace diff rows (db, key, category, m_*, r_*) into rows of the findings schema."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from audit.findings import FINDING_COLUMNS, SEVERITY_BY_CATEGORY


def _side(prefix: str) -> Column:
    return F.struct(*[F.col(f"{prefix}{c}").alias(c) for c in ("type", "ttl_ms", "expire_at_ms", "length", "status")])


def severity_of(category: Column) -> Column:
    """The findings schema's severity of a category column: SEVERITY_BY_CATEGORY as a Spark map."""
    return F.create_map(*[F.lit(x) for kv in SEVERITY_BY_CATEGORY.items() for x in kv])[category]


def keyspace_findings(rows: DataFrame, run_id: str, pair: str, kind: str, rechecked_rounds: int) -> DataFrame:
    """One finding per diverged key, with what each side holds in `detail`."""
    ttl_delta = F.col("r_expire_at_ms") - F.col("m_expire_at_ms")
    detail = F.to_json(
        F.struct(
            _side("m_").alias("master"),
            _side("r_").alias("replica"),
            ttl_delta.alias("ttl_delta_ms"),
            F.lit(rechecked_rounds).alias("rechecked_rounds"),
        )
    )
    return rows.select(
        F.lit(run_id).alias("run_id"),
        F.lit(pair).alias("pair"),
        F.lit(kind).alias("kind"),
        F.lit("keyspace").alias("check"),
        F.col("category"),
        severity_of(F.col("category")).alias("severity"),
        F.col("db").cast("int").alias("db"),
        F.col("key"),
        F.lit(None).cast("string").alias("start"),
        F.lit(None).cast("string").alias("end"),
        F.lit(None).cast("long").alias("start_num"),
        F.lit(None).cast("long").alias("end_num"),
        F.lit(1).cast("long").alias("count"),
        F.lit(None).cast("long").alias("bytes"),
        F.col("m_digest").alias("master_digest"),
        F.col("r_digest").alias("replica_digest"),
        F.lit(None).cast("string").alias("diagnosis"),
        detail.alias("detail"),
    ).select(*FINDING_COLUMNS)
