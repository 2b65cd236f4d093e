"""Build the gate's input (one row of counts per pair) and run the kind's GX suite on it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from audit.findings import CATEGORIES
from audit.inventory import Pair
from audit.layout import RunDir

EXPECTATIONS_DIR = Path(__file__).resolve().parents[2] / "expectations"
"""The suites. Overridable with REPLICA_AUDIT_EXPECTATIONS for an installed (non-editable) package."""

METRICS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("pair", pa.string()),
        ("kind", pa.string()),
        ("metric", pa.string()),
        ("value", pa.float64()),
    ]
)


def expectations_dir() -> Path:
    import os

    return Path(os.environ.get("REPLICA_AUDIT_EXPECTATIONS", EXPECTATIONS_DIR))


def gate_row(state: dict[str, Any]) -> dict[str, int | float | None]:
    counts = state.get("counts", {})
    m = state.get("metrics", {})
    row: dict[str, int | float | None] = {c: int(counts.get(c, 0)) for c in CATEGORIES}
    row["uncovered"] = int(m.get("master_keys_unreadable", 0)) + int(m.get("replica_keys_unreadable", 0))
    row["lag_bytes"] = m.get("lag_bytes")
    row["lag_seconds"] = m.get("lag_seconds")
    return row


def gate_parameters(pair: Pair) -> dict[str, int | float | None]:
    params: dict[str, int | float | None] = {f"max_{c}": limit for c, limit in pair.gate.category_limits().items()}
    for c in CATEGORIES:
        params.setdefault(f"max_{c}", 0)
    params.update(
        max_uncovered=pair.gate.max_uncovered,
        max_lag_bytes=pair.gate.max_lag_bytes,
        max_lag_seconds=pair.gate.max_lag_seconds,
    )
    return params


def gate_pair(run: RunDir, pair: Pair, suite: str) -> dict[str, Any]:
    """Validate the pair's counts with GX; store the verdict in the pair's state; write its metrics."""
    from audit.gate.gx import validate_gate

    state = run.require_stage(pair.name, "recheck")
    started = time.time()
    result = validate_gate(
        gate_row(state), expectations_dir() / suite, gate_parameters(pair), run.gate_dir(), pair.name
    )
    verdict = {
        "success": result.success,
        "evaluated": result.evaluated,
        "failed": [
            {
                "expectation": f.expectation,
                "column": f.column,
                "observed": f.observed,
                "threshold": f.threshold,
                "meaning": f.meaning,
            }
            for f in result.failed
        ],
        "results_path": str(Path(result.results_path).relative_to(run.root)),
        "data_docs": str(Path(result.data_docs_index).relative_to(run.root)) if result.data_docs_index else None,
        "gate_s": round(time.time() - started, 3),
    }
    state["gate"] = verdict
    state["stages"]["gate"] = {"at_ms": int(time.time() * 1000)}
    run.save_state(pair.name, state)
    write_metrics(run, pair, state)
    return verdict


def write_metrics(run: RunDir, pair: Pair, state: dict[str, Any]) -> None:
    values: dict[str, Any] = {**state.get("metrics", {})}
    values.update({f"findings_{c}": n for c, n in state.get("counts", {}).items()})
    if "gate" in state:
        values["gate_passed"] = 1.0 if state["gate"]["success"] else 0.0
    rows = [
        {"run_id": run.run_id, "pair": pair.name, "kind": pair.kind, "metric": k, "value": float(v)}
        for k, v in sorted(values.items())
        if isinstance(v, int | float) and not isinstance(v, bool)
    ]
    path = run.metrics_file(pair.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=METRICS_SCHEMA), path)
