"""Spark rows as rows of the findings schema: one projection, `to_findings`, used by every producer."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from audit.findings import FINDINGS_SCHEMA, SEVERITY_BY_CATEGORY

if TYPE_CHECKING:
    from pyspark.sql.types import DataType

_STAMPED = ("run_id", "pair", "kind")
"""Left null by producers: the pipeline stamps them when it writes the pair's findings."""


@cache
def _spark_types() -> dict[str, DataType]:
    from pyspark.sql.pandas.types import from_arrow_schema

    return {f.name: f.dataType for f in from_arrow_schema(FINDINGS_SCHEMA).fields}


def severity_of(category: Column) -> Column:
    """The findings schema's severity of a category column: SEVERITY_BY_CATEGORY as a Spark map."""
    return F.create_map(*[F.lit(x) for kv in SEVERITY_BY_CATEGORY.items() for x in kv])[category]


def to_findings(rows: DataFrame, *, check: str, category: Column | str, **columns: Column) -> DataFrame:
    """`rows` projected onto the findings schema, in its column order and types.

    `category` is a column or a literal category name; the severity follows from it. Every other
    schema column comes from `columns` (e.g. ``detail=F.to_json(F.struct(...))``), else from a column of
    `rows` with that name, else null.
    """
    cat = F.lit(category) if isinstance(category, str) else category
    given = {"check": F.lit(check), "category": cat, "severity": severity_of(cat), **columns}
    exprs = []
    for name, dtype in _spark_types().items():
        if name in given:
            expr = given[name]
        elif name in rows.columns and name not in _STAMPED:
            expr = F.col(name)
        else:
            expr = F.lit(None)
        exprs.append(expr.cast(dtype).alias(name))
    return rows.select(*exprs)


def _side(prefix: str) -> Column:
    return F.struct(*[F.col(f"{prefix}{c}").alias(c) for c in ("type", "ttl_ms", "expire_at_ms", "length", "status")])


def keyspace_findings(rows: DataFrame, rechecked_rounds: int, extra: Mapping[str, Column] | None = None) -> DataFrame:
    """One finding per diverged key (diff rows: db, key, category, m_*, r_*), what each side holds in `detail`;
    `extra` adds fields to `detail` (e.g. which shard and replica of a fleet)."""
    detail = F.to_json(
        F.struct(
            _side("m_").alias("master"),
            _side("r_").alias("replica"),
            (F.col("r_expire_at_ms") - F.col("m_expire_at_ms")).alias("ttl_delta_ms"),
            F.lit(rechecked_rounds).alias("rechecked_rounds"),
            *[c.alias(name) for name, c in (extra or {}).items()],
        )
    )
    return to_findings(
        rows,
        check="keyspace",
        category=F.col("category"),
        count=F.lit(1),
        master_digest=F.col("m_digest"),
        replica_digest=F.col("r_digest"),
        detail=detail,
    )
