"""Compare modes of a pair (`compare: full | length | keys`): which keyspace differences count.

| mode     | a key diverges when                                              | categories                     |
|----------|------------------------------------------------------------------|--------------------------------|
| `full`   | presence, type, value digest, element count or TTL differ         | all five (the default)         |
| `length` | presence, type, element count (or an unstable read) or TTL differ | all five; equal-length values  |
|          |                                                                  | with other digests do not count |
|          |                                                                  | (their TTL still does)          |
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
    ttl_differs: bool = False,
) -> str | None:
    """The category `classify` gave, as the mode sees it (None: not a divergence in this mode).

    `ttl_differs`: whether the two expiries differ past the tolerance. The full rule names a key whose
    value and TTL both differ a value_mismatch; where `length` ignores that value (same count), the TTL
    it compares is still a divergence."""
    check_mode(mode)
    if category is None or mode == "full":
        return category
    if mode == "keys":
        return category if category in PRESENCE else None
    if mode == "length":
        if category != "value_mismatch":
            return category
        unstable = "unstable" in (m_status, r_status)
        if unstable or m_length != r_length:
            return category
        return "ttl_mismatch" if ttl_differs else None
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


def apply_mode(classified: DataFrame, mode: str, ttl_tolerance_ms: int | None = None) -> DataFrame:
    """`category` rewritten for the mode; rows it no longer counts get a null category (so
    :func:`audit.diff.keyspace.candidates` drops them and the coverage counts stay as they are).
    With `ttl_tolerance_ms`, the frame's expiries (m_/r_expire_at_ms) decide a `length` row whose value
    the mode ignores, as :func:`mode_category`'s `ttl_differs`; without, such a row has no TTL difference."""
    from pyspark.sql import functions as F

    if check_mode(mode) == "full":
        return classified
    cat = F.col("category")
    if mode == "keys":
        new = F.when(cat.isin(*PRESENCE), cat)
    else:  # length
        unstable = (F.col("m_status") == "unstable") | (F.col("r_status") == "unstable")
        length_differs = ~F.col("m_length").eqNullSafe(F.col("r_length"))
        if ttl_tolerance_ms is None:
            ttl = F.lit(None)
        else:
            from audit.diff.keyspace import ttl_differs

            ttl = F.when(ttl_differs(ttl_tolerance_ms), F.lit("ttl_mismatch"))
        new = F.when((cat == "value_mismatch") & ~(unstable | length_differs), ttl).otherwise(cat)
    return classified.withColumn("category", new)
