"""The pair's state between stages, as a typed model written as JSON (work/<pair>/state.json).

The pipeline owns it: it loads or requires it, stamps each stage, and saves it. Checks read and write
their parts through the stage context: metrics, servers, offsets, and a JSON slot of their own
(`check_data[<check name>]`) for what only that check reads back in a later stage.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MetricValue = int | float | None

CheckStatus = Literal["done", "skipped"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StageStamp(_Model):
    at_ms: int
    took_s: float = 0.0


class CheckState(_Model):
    status: CheckStatus
    reason: str = ""


class ErrorInfo(_Model):
    """Why a pair could not be audited. `type` is the exception's class; `internal` marks a bug."""

    stage: str
    message: str
    type: str
    where: str = ""
    exit_code: int = 3
    internal: bool = False
    traceback: str | None = None


class FailedExpectation(_Model):
    expectation: str
    column: str | None
    observed: Any = None
    threshold: Any = None
    meaning: str = ""


class GateVerdict(_Model):
    success: bool
    evaluated: int
    failed: list[FailedExpectation] = Field(default_factory=list)
    results_path: str | None = None
    data_docs: str | None = None
    gate_s: float = 0.0


REPLICATION_UNIT = "replication offset (bytes)"


class Offsets(_Model):
    """Master and replica positions for the reports' charts, in one unit (bytes of a replication stream
    or of a log). `samples` are (at_ms, master, replica) over time; `by_db` the last positions per db."""

    unit: str = REPLICATION_UNIT
    samples: list[tuple[int, float | None, float | None]] = Field(default_factory=list)
    by_db: dict[str, dict[str, float | None]] = Field(default_factory=dict)

    @property
    def last(self) -> tuple[float | None, float | None]:
        if self.samples:
            return self.samples[-1][1], self.samples[-1][2]
        total = {side: _sum(o.get(side) for o in self.by_db.values()) for side in ("master", "replica")}
        return total["master"], total["replica"]


def _sum(values: Iterable[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return float(sum(found)) if found else None


class PairState(_Model):
    pair: str
    kind: str
    stages: dict[str, StageStamp] = Field(default_factory=dict)
    checks: dict[str, CheckState] = Field(default_factory=dict)
    metrics: dict[str, MetricValue] = Field(default_factory=dict)
    counts: dict[str, int] = Field(default_factory=dict)
    servers: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Per side: endpoint (redacted), version, role, and what else the kind shows of a server."""
    dbs: list[int] | None = None
    replication_samples: list[dict[str, Any]] = Field(default_factory=list)
    offsets: Offsets | None = None
    artifacts: dict[str, str] = Field(default_factory=dict)
    """Files a check wrote for people (a repair plan): label -> path relative to the run directory."""
    notes: list[str] = Field(default_factory=list)
    """Plain sentences for the summary about how the pair was audited (e.g. which dbs were compared)."""
    limits: list[str] = Field(default_factory=list)
    """What the audit did not compare because the inventory asked so (a compare mode without values, a key
    filter): not uncovered, but never reported as full coverage either."""
    check_data: dict[str, dict[str, Any]] = Field(default_factory=dict)
    gate: GateVerdict | None = None
    error: ErrorInfo | None = None

    def skipped(self, check: str) -> bool:
        c = self.checks.get(check)
        return c is not None and c.status == "skipped"
