"""Build the gate's input (one row of counts per pair) and run the kind's GX suite on it.

The row has a column per finding category, `uncovered` (what the kind's checks declare they could not
cover, audit/kernel/check.py), `in_flight`, `lag_bytes` and `lag_seconds`. The thresholds come from
the pair's `gate:` block.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from audit.findings import CATEGORIES
from audit.inventory import Pair
from audit.kernel.check import Uncovered
from audit.kernel.kind import KindSpec
from audit.kernel.state import FailedExpectation, GateVerdict, PairState
from audit.kernel.suite import suite_file
from audit.layout import RunDir

METRICS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("pair", pa.string()),
        ("kind", pa.string()),
        ("metric", pa.string()),
        ("value", pa.float64()),
    ]
)


def uncovered_of(spec: KindSpec, pair: Pair, state: PairState) -> list[Uncovered]:
    """What the pair's checks that ran say they could not cover. A skipped check is not asked (the summary
    lists it under skipped_checks, and the report never calls such a pair fully covered)."""
    found: list[Uncovered] = []
    for check in spec.checks(pair):
        if not state.skipped(check.name):
            found.extend(check.uncovered(state.metrics))
    return found


def gate_row(state: PairState, uncovered: list[Uncovered]) -> dict[str, int | float | None]:
    row: dict[str, int | float | None] = {c: int(state.counts.get(c, 0)) for c in CATEGORIES}
    row["uncovered"] = sum(u.count for u in uncovered if u.gated)
    row["in_flight"] = int(state.metrics.get("recheck_in_flight") or 0)
    row["lag_bytes"] = state.metrics.get("lag_bytes")
    row["lag_seconds"] = state.metrics.get("lag_seconds")
    return row


def gate_parameters(pair: Pair) -> dict[str, int | float | None]:
    params: dict[str, int | float | None] = {f"max_{c}": limit for c, limit in pair.gate.category_limits().items()}
    for c in CATEGORIES:
        params.setdefault(f"max_{c}", 0)
    params.update(
        max_uncovered=pair.gate.max_uncovered,
        max_in_flight=pair.gate.max_in_flight,
        max_lag_bytes=pair.gate.max_lag_bytes,
        max_lag_seconds=pair.gate.max_lag_seconds,
    )
    return params


def gate_pair(run: RunDir, pair: Pair, spec: KindSpec, state: PairState) -> GateVerdict:
    """Validate the pair's counts with GX; keep the verdict in the pair's state; write its metrics."""
    from audit.gate.gx import validate_gate

    started = time.time()
    row = gate_row(state, uncovered_of(spec, pair, state))
    result = validate_gate(row, suite_file(spec.suite), gate_parameters(pair), run.gate_dir(), pair.name)
    state.gate = GateVerdict(
        success=result.success,
        evaluated=result.evaluated,
        failed=[
            FailedExpectation(
                expectation=f.expectation,
                column=f.column,
                observed=f.observed,
                threshold=f.threshold,
                meaning=f.meaning,
            )
            for f in result.failed
        ],
        results_path=str(Path(result.results_path).relative_to(run.root)),
        data_docs=str(Path(result.data_docs_index).relative_to(run.root)) if result.data_docs_index else None,
        gate_s=round(time.time() - started, 3),
    )
    write_metrics(run, pair, state)
    return state.gate


def write_metrics(run: RunDir, pair: Pair, state: PairState) -> None:
    values: dict[str, Any] = {**state.metrics}
    values.update({f"findings_{c}": n for c, n in state.counts.items()})
    if state.gate is not None:
        values["gate_passed"] = 1.0 if state.gate.success else 0.0
    rows = [
        {"run_id": run.run_id, "pair": pair.name, "kind": pair.kind, "metric": k, "value": float(v)}
        for k, v in sorted(values.items())
        if isinstance(v, int | float) and not isinstance(v, bool)
    ]
    path = run.metrics_file(pair.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=METRICS_SCHEMA), path)
