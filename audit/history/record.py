"""What one finished run contributes to the history: read from DIR/<run_id>/, no database involved.

Sources, all written by the pipeline: `manifest.json` (run id, start/end, tool version, inventory
digest), `summary.json` (per pair: status, counts per category, diagnoses, gate, metrics) and
`metrics.parquet/<pair>.parquet` (one row per (pair, metric), written by the gate). A pair that ended
in an error has no metrics file; its numeric summary metrics are used instead, so a trend shows what
was measured before the failure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from audit.errors import StageInputError
from audit.layout import TIME_FORMAT, read_json_object  # how times are stored: as in manifest.json


@dataclass(frozen=True)
class PairRecord:
    pair: str
    kind: str
    status: str
    counts: dict[str, int]
    diagnoses: dict[str, int]
    failed_checks: list[str]
    durations: dict[str, float]
    lag_bytes: float | None
    lag_seconds: float | None

    @property
    def divergences(self) -> int:
        return sum(self.counts.values())

    @property
    def duration_s(self) -> float | None:
        """Sum of the measured stage times: work done, not wall time (the two sides snapshot at once)."""
        return round(sum(self.durations.values()), 3) if self.durations else None


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    started_at: str | None
    ended_at: str | None
    exit_code: int | None
    verdict: str | None
    tool_version: str | None
    inventory_digest: str | None
    pairs: list[PairRecord]
    metrics: list[tuple[str, str, float]]
    """(pair, metric, value), unique per (pair, metric)."""
    kept_pairs: tuple[str, ...] = ()
    """Pairs of the run this summary leaves out (a resumed `--pair` subset): their rows, written by an
    earlier append of the same run, stay as they are."""

    @property
    def duration_s(self) -> float | None:
        if not self.started_at or not self.ended_at:
            return None
        start, end = (datetime.strptime(t, TIME_FORMAT) for t in (self.started_at, self.ended_at))
        return (end - start).total_seconds()


def _load_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise StageInputError(f"{path.parent}: no {path.name}; finish the run (`replica-audit report`) first")
    return read_json_object(path)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _durations(summary_pair: dict[str, Any]) -> dict[str, float]:
    """Every `*_s` metric (stage times; `*_per_s` are rates) and the gate's own time."""
    found = {
        k: float(v)
        for k, v in summary_pair.get("metrics", {}).items()
        if k.endswith("_s") and not k.endswith("_per_s") and _number(v) is not None
    }
    gate_s = _number((summary_pair.get("gate") or {}).get("gate_s"))
    if gate_s is not None:
        found["gate_s"] = gate_s
    return dict(sorted(found.items()))


def _pair_record(p: dict[str, Any]) -> PairRecord:
    metrics = p.get("metrics", {})
    return PairRecord(
        pair=p["pair"],
        kind=p.get("kind", ""),
        status=p.get("status", ""),
        counts={c: int(n) for c, n in sorted((p.get("counts") or {}).items())},
        diagnoses={
            code: int(d["count"] if isinstance(d, dict) else d)
            for code, d in sorted((p.get("diagnoses") or {}).items())
        },
        failed_checks=sorted(
            {str(f.get("column") or f.get("expectation")) for f in (p.get("gate") or {}).get("failed", [])}
        ),
        durations=_durations(p),
        lag_bytes=_number(metrics.get("lag_bytes")),
        lag_seconds=_number(metrics.get("lag_seconds")),
    )


def _metrics(run_dir: Path, summary_pairs: list[dict[str, Any]]) -> list[tuple[str, str, float]]:
    values: dict[tuple[str, str], float] = {}
    for p in summary_pairs:
        for metric, v in p.get("metrics", {}).items():
            if (num := _number(v)) is not None:
                values[(p["pair"], metric)] = num
    folder = run_dir / "metrics.parquet"
    if folder.is_dir() and any(folder.glob("*.parquet")):
        import pyarrow.dataset as ds

        table = ds.dataset(folder, format="parquet").to_table(columns=["pair", "metric", "value"])
        for row in table.to_pylist():
            if (num := _number(row["value"])) is not None:
                values[(row["pair"], row["metric"])] = num
    return [(pair, metric, v) for (pair, metric), v in sorted(values.items())]


def read_run(run_dir: Path) -> RunRecord:
    """The history rows of one finished run. Raises StageInputError when the run has no summary yet."""
    run_dir = Path(run_dir)
    manifest = _load_json(run_dir / "manifest.json")
    summary = _load_json(run_dir / "summary.json")
    run_id = summary.get("run_id") or manifest.get("run_id") or run_dir.name
    pairs = summary.get("pairs", [])
    kept = tuple(str(p["pair"]) for p in summary.get("pairs_not_in_this_summary", []) if p.get("pair"))
    exit_code = summary.get("exit_code", manifest.get("exit_code"))
    return RunRecord(
        run_id=str(run_id),
        started_at=manifest.get("started_at"),
        ended_at=manifest.get("ended_at"),
        exit_code=int(exit_code) if exit_code is not None else None,
        verdict=summary.get("verdict"),
        tool_version=manifest.get("tool_version"),
        inventory_digest=manifest.get("inventory_digest"),
        pairs=[_pair_record(p) for p in pairs],
        metrics=[m for m in _metrics(run_dir, pairs) if m[0] not in kept],
        kept_pairs=kept,
    )


def format_time(value: str | datetime | None) -> str | None:
    """A `since` bound as stored text; naive datetimes are taken as UTC."""
    if value is None or isinstance(value, str):
        return value
    if value.tzinfo is not None:
        value = value.astimezone(UTC)
    return value.strftime(TIME_FORMAT)
