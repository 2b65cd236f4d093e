"""Master and replica offsets of one run, for the reports' "master vs replica offsets" charts.

Checks that measure positions leave them in the pair's state as :class:`~audit.kernel.state.Offsets`
(summary.json's `offsets`). Runs that only recorded metrics are read through :data:`OFFSET_METRICS`.
A missing or malformed entry just means no chart, and so does a side whose reading stopped at damage
(`<side>_end_unknown`): its end, hence the gap, is not known.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from audit.kernel.state import REPLICATION_UNIT, Offsets

__all__ = ["OFFSET_METRICS", "REPLICATION_UNIT", "Offsets", "run_offsets"]

OFFSET_METRICS = (
    ("master_offset", "replica_offset"),
    ("master_max_offset", "replica_max_offset"),
)
"""(master metric, replica metric) names under which a check may record its end positions, in bytes."""


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _from_metrics(metrics: dict[str, Any]) -> Offsets | None:
    if metrics.get("master_end_unknown") or metrics.get("replica_end_unknown"):
        return None  # reading stopped at damage: where a side ends is not known, so neither is the gap
    for m_name, r_name in OFFSET_METRICS:
        m, r = _number(metrics.get(m_name)), _number(metrics.get(r_name))
        if m is not None and r is not None:
            return Offsets(unit=REPLICATION_UNIT, by_db={"all": {"master": m, "replica": r}})
    return None


def run_offsets(pair: dict[str, Any]) -> Offsets | None:
    """The offsets of one pair of one run (a summary.json pair entry)."""
    try:
        if pair.get("offsets"):
            return Offsets.model_validate(pair["offsets"])
        return _from_metrics(pair.get("metrics") or {})
    except (ValidationError, AttributeError, TypeError):
        return None  # a format this version does not know: no chart rather than no report
