"""The findings schema: one row per divergence, the same for every kind (docs/architecture.md, "Findings").

Detectors build :class:`Finding` values (or Spark rows with the same columns); :data:`FINDINGS_SCHEMA`
is the one Arrow schema both the Parquet output and the Spark jobs use.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import pyarrow as pa

SEVERITY_BY_CATEGORY: dict[str, str] = {
    "missing_on_replica": "critical",
    "extra_on_replica": "critical",
    "type_mismatch": "critical",
    "value_mismatch": "critical",
    "ttl_mismatch": "warning",
    "missing_range": "critical",
    "duplicate_range": "critical",
    "divergent_entry": "critical",
    "replica_ahead": "critical",
    "corrupt_record": "critical",
    "torn_tail": "info",
    "negative_lag": "warning",
    "stale_replica_data": "critical",
    "link_down": "critical",
    "lagging": "warning",
    "lag_metric_unreliable": "info",
    "missing_row": "critical",
    "extra_row": "critical",
    "row_mismatch": "critical",
    "missing_gtid": "critical",
    "errant_gtid": "critical",
    # A selected table on one side only, and column definitions that differ (rows are still compared
    # over the columns both sides have).
    "missing_table": "critical",
    "extra_table": "critical",
    "schema_mismatch": "warning",
    # Added by replica-audit (README, "Contract changes"): the server named as replica follows some
    # other master, so diffing it against this pair's master would report noise, not divergence.
    "wrong_master": "critical",
    # Redis fleets (issue 11): slot ranges no master owns (keys there cannot be served or audited), a
    # cluster that says it is down, and slots being resharded (info: their keys are read on both nodes).
    "uncovered_slots": "critical",
    "cluster_down": "critical",
    "slot_migration": "info",
}
CATEGORIES = tuple(SEVERITY_BY_CATEGORY)
NOT_GATED_BY_DEFAULT = frozenset({"lagging"})
"""Categories whose gate threshold is null (not gated) unless a pair sets one, besides every info-level
category: lag is judged by the max_lag_bytes / max_lag_seconds thresholds instead."""


def default_threshold(category: str) -> int | None:
    """The gate threshold a pair gets for `category` when it sets none: 0, or None (not gated)."""
    if category in NOT_GATED_BY_DEFAULT or SEVERITY_BY_CATEGORY[category] == "info":
        return None
    return 0


KEYSPACE_CATEGORIES = ("missing_on_replica", "extra_on_replica", "type_mismatch", "value_mismatch", "ttl_mismatch")

FINDINGS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("pair", pa.string()),
        ("kind", pa.string()),
        ("check", pa.string()),
        ("category", pa.string()),
        ("severity", pa.string()),
        ("db", pa.int32()),
        ("key", pa.binary()),
        ("start", pa.string()),
        ("end", pa.string()),
        ("start_num", pa.int64()),
        ("end_num", pa.int64()),
        ("count", pa.int64()),
        ("bytes", pa.int64()),
        ("master_digest", pa.string()),
        ("replica_digest", pa.string()),
        ("diagnosis", pa.string()),
        ("detail", pa.string()),
    ]
)
FINDING_COLUMNS = tuple(FINDINGS_SCHEMA.names)


@dataclass(frozen=True, slots=True)
class Finding:
    """One divergence. ``evidence`` is serialised into the ``detail`` JSON column."""

    check: str
    category: str
    db: int | None = None
    key: bytes | None = None
    start: str | None = None
    end: str | None = None
    start_num: int | None = None
    end_num: int | None = None
    count: int | None = None
    bytes: int | None = None
    master_digest: str | None = None
    replica_digest: str | None = None
    diagnosis: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    severity: str = ""

    def __post_init__(self) -> None:
        if self.category not in SEVERITY_BY_CATEGORY:
            raise ValueError(f"unknown finding category {self.category!r}")
        if not self.severity:
            object.__setattr__(self, "severity", SEVERITY_BY_CATEGORY[self.category])

    def with_diagnosis(self, code: str, **evidence: Any) -> Finding:
        return replace(self, diagnosis=code, evidence={**self.evidence, **evidence})

    def to_row(self, run_id: str | None, pair: str | None, kind: str | None) -> dict[str, Any]:
        row = asdict(self)
        evidence = row.pop("evidence")
        row.update(run_id=run_id, pair=pair, kind=kind, detail=json.dumps(evidence, sort_keys=True, default=str))
        return {name: row[name] for name in FINDING_COLUMNS}


def findings_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=FINDINGS_SCHEMA)
