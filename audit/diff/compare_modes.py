"""Compare modes of a pair (`compare: full | length | keys`): which keyspace differences count.

| mode     | a key diverges when                                              | categories                     |
|----------|------------------------------------------------------------------|--------------------------------|
| `full`   | presence, type, value digest, element count or TTL differ         | all five (the default)         |
| `length` | presence, type, element count (or an unstable read) or TTL differ | all five; equal-length values  |
|          |                                                                  | with other digests do not count |
| `keys`   | only one side has the key                                        | missing/extra_on_replica       |

One rule, two forms that agree (tested on the same rows): :func:`mode_category` for Python rows and
:func:`apply_mode` for the Spark frames of `audit/diff/keyspace.py` (after :func:`classify`, or on its
candidates). The recheck must apply the same mode, or it would re-flag what the mode ignores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, get_args

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

CompareMode = Literal["full", "length", "keys"]
COMPARE_MODES: tuple[str, ...] = get_args(CompareMode)
PRESENCE = ("missing_on_replica", "extra_on_replica")


def mode_category(
    category: str | None,
    mode: str,
    *,
    m_length: int | None = None,
    r_length: int | None = None,
    m_status: str | None = None,
    r_status: str | None = None,
) -> str | None:
    """The category `classify` gave, as the mode sees it (None: not a divergence in this mode)."""
    check_mode(mode)
    if category is None or mode == "full":
        return category
    if mode == "keys":
        return category if category in PRESENCE else None
    if mode == "length":
        if category != "value_mismatch":
            return category
        unstable = "unstable" in (m_status, r_status)
        return category if unstable or m_length != r_length else None
    return category


def check_mode(mode: str) -> str:
    if mode not in COMPARE_MODES:
        raise ValueError(f"unknown compare mode {mode!r} (expected one of {', '.join(COMPARE_MODES)})")
    return mode


def row_category(row: Any, mode: str) -> str | None:
    """:func:`mode_category` of a diff row (a Spark Row or a mapping with category, m_*/r_* columns)."""
    return mode_category(
        row["category"],
        mode,
        m_length=row["m_length"],
        r_length=row["r_length"],
        m_status=row["m_status"],
        r_status=row["r_status"],
    )


def apply_mode(classified: DataFrame, mode: str) -> DataFrame:
    """`category` rewritten for the mode; rows it no longer counts get a null category (so
    :func:`audit.diff.keyspace.candidates` drops them and the coverage counts stay as they are)."""
    from pyspark.sql import functions as F

    if check_mode(mode) == "full":
        return classified
    cat = F.col("category")
    if mode == "keys":
        new = F.when(cat.isin(*PRESENCE), cat)
    else:  # length
        unstable = (F.col("m_status") == "unstable") | (F.col("r_status") == "unstable")
        length_differs = ~F.col("m_length").eqNullSafe(F.col("r_length"))
        new = F.when((cat == "value_mismatch") & ~(unstable | length_differs), F.lit(None)).otherwise(cat)
    return classified.withColumn("category", new)
