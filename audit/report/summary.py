"""summary.json: per pair, counts per category, diagnoses, coverage, skipped checks and the gate verdict."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow.dataset as ds

from audit import defaults
from audit.diagnose import meaning
from audit.gate.verdict import uncovered_of
from audit.inventory import Pair
from audit.kernel.check import Uncovered
from audit.kernel.kind import kind_spec
from audit.kernel.state import PairState
from audit.layout import RunDir
from audit.outcome import VERDICTS, pair_exit_code, pair_status, run_exit_code


def _as_text(key: bytes) -> str | None:
    """The key as text when it is printable UTF-8, else None (it is shown as bytes)."""
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text.isprintable() else None


def display_key(key: bytes | None) -> str | None:
    """Printable UTF-8 as is; anything else as 0x-hex (binary-safe, never mangled)."""
    if key is None:
        return None
    text = _as_text(key)
    if text is not None:
        return text if len(text) <= 200 else text[:200] + "…"
    return "0x" + key[:100].hex() + ("…" if len(key) > 100 else "")


def key_shape(key: bytes | None) -> dict[str, Any]:
    """How `display_key` showed a key: `key_hex` (its bytes, not its text: a key named "0x41" is text) and
    `key_bytes` (its whole length, when the display is cut)."""
    if key is None:
        return {}
    shown = display_key(key) or ""
    shape: dict[str, Any] = {}
    if _as_text(key) is None:
        shape["key_hex"] = True
    if shown.endswith("…"):
        shape["key_bytes"] = len(key)
    return shape


Sample = dict[str, list[dict[str, Any]]]


def findings_sample(run: RunDir, pair: str, per_category: int) -> tuple[Sample, dict[str, int]]:
    """The first findings of each category and the count per diagnosis, streaming the pair's file."""
    path = run.findings_file(pair)
    sample: Sample = {}
    diagnoses: dict[str, int] = {}
    if not path.exists():
        return sample, diagnoses
    for batch in ds.dataset(path, format="parquet").to_batches(batch_size=10_000):
        for row in batch.to_pylist():
            if row["diagnosis"]:
                diagnoses[row["diagnosis"]] = diagnoses.get(row["diagnosis"], 0) + 1
            bucket = sample.setdefault(row["category"], [])
            if len(bucket) < per_category:
                bucket.append(
                    {
                        "severity": row["severity"],
                        "check": row["check"],
                        "db": row["db"],
                        "key": display_key(row["key"]),
                        **key_shape(row["key"]),
                        "start": row["start"],
                        "end": row["end"],
                        "count": row["count"],
                        "bytes": row["bytes"],
                        "master_digest": row["master_digest"],
                        "replica_digest": row["replica_digest"],
                        "diagnosis": row["diagnosis"],
                        "detail": json.loads(row["detail"] or "{}"),
                    }
                )
    return sample, diagnoses


def pair_verdict(run: RunDir, pair: str) -> dict[str, Any]:
    """A pair's verdict in this run, small enough for an Airflow asset event: status, counts, failed checks."""
    state = run.load_state(pair) or PairState(pair=pair, kind="")
    gate = state.gate
    return {
        "run_id": run.run_id,
        "pair": pair,
        "status": pair_status(state),
        "divergences": sum(int(n) for n in state.counts.values()),
        "counts": {c: int(n) for c, n in sorted(state.counts.items())},
        "failed_checks": sorted({str(f.column) for f in gate.failed}) if gate else [],
        "keys_compared": state.metrics.get("keys_compared"),
        # what any kind compared (rows and tables, records, bytes, keys): keys_compared is a keyspace's only
        "compared": {k: int(v) for k, v in sorted(state.metrics.items()) if k.endswith("_compared") and v is not None},
        "error": state.error.message if state.error else None,
    }


def _not_covered(uncovered: list[Uncovered], state: PairState) -> list[str]:
    found = [u.reason for u in uncovered if u.count]
    if state.error is not None:
        found.append(state.error.message)
    elif state.gate is None:
        found.append("the audit did not finish")
    return found


def compared_lines(coverage: dict[str, Any]) -> list[str]:
    """`keys_compared: 1200` -> "1,200 keys compared", whatever a kind compares (rows, tables, bytes, records);
    one of them in the singular ("1 table compared")."""
    items = [
        (k.removesuffix("_compared").replace("_", " "), int(v or 0))
        for k, v in coverage.items()
        if k.endswith("_compared")
    ]
    return [f"{n:,} {what.removesuffix('s') if n == 1 else what} compared" for what, n in items]


def in_flight_lines(metrics: dict[str, Any]) -> list[str]:
    """Differences the recheck left undecided (still changing, or a replica that never reached the
    master's position): said next to what was compared, since the gate counts them only where
    `max_in_flight` is set."""
    n = int(metrics.get("recheck_in_flight") or 0)
    why = "in_flight: still changing, or the replica never reached the master's position"
    return [f"{n:,} undecided after the recheck ({why}): not judged"] if n else []


def pair_summary(run: RunDir, pair: Pair, per_category: int) -> dict[str, Any]:
    spec = kind_spec(pair.kind)
    state = run.load_state(pair.name) or PairState(pair=pair.name, kind=pair.kind)
    sample, diagnoses = findings_sample(run, pair.name, per_category)
    checks_run = [c for c in spec.checks(pair) if not state.skipped(c.name)]
    coverage_keys = [k for check in spec.checks(pair) for k in check.coverage]
    headlines = [line for check in checks_run for line in check.headlines(run, state)] if state.counts else []
    checks = {name: c.model_dump() for name, c in state.checks.items()}
    coverage = {k: state.metrics[k] for k in coverage_keys if k in state.metrics}
    return {
        "pair": pair.name,
        "kind": pair.kind,
        "status": pair_status(state),
        "exit_code": pair_exit_code(state),
        "servers": state.servers,
        "dbs": state.dbs,
        "checks": checks,
        "skipped_checks": {name: c.reason for name, c in state.checks.items() if c.status == "skipped"},
        "not_covered": _not_covered(uncovered_of(spec, pair, state), state),
        "limits": state.limits,
        "headlines": headlines,
        "notes": state.notes,
        "artifacts": state.artifacts,
        "coverage": coverage,
        "compared": compared_lines(coverage) + in_flight_lines(state.metrics),
        "metrics": state.metrics,
        "counts": state.counts,
        "diagnoses": {code: {"count": n, "meaning": meaning(code)} for code, n in sorted(diagnoses.items())},
        "gate": state.gate.model_dump() if state.gate else None,
        "error": state.error.model_dump(exclude={"traceback"}) if state.error else None,
        "findings_sample": sample,
        "replication_samples": state.replication_samples,
        "offsets": state.offsets.model_dump() if state.offsets else None,
    }


def build_summary(
    run: RunDir, pairs: list[Pair], per_category: int = defaults.FINDINGS_SAMPLE, run_pairs: Sequence[str] = ()
) -> dict[str, Any]:
    """The run's summary for `pairs`. `run_pairs` are the pairs the run's manifest lists: one that this run
    worked on (it has a state) but that is left out of `pairs` (a `--pair` subset, an edited inventory)
    still counts in the run's verdict as its state says, so a report of the pairs that passed never turns
    a run that failed into a pass. A pair the run never started is not part of it."""
    summaries = [pair_summary(run, p, per_category) for p in pairs]
    shown = {p.name for p in pairs}
    states = [run.load_state(name) for name in run_pairs if name not in shown]
    left_out = [_left_out(state) for state in states if state is not None]
    code = run_exit_code([s["exit_code"] for s in summaries] + [p["exit_code"] for p in left_out])
    out = {"run_id": run.run_id, "verdict": VERDICTS[code], "exit_code": code, "pairs": summaries}
    if left_out:
        out["pairs_not_in_this_summary"] = left_out
    return out


def _left_out(state: PairState) -> dict[str, Any]:
    return {"pair": state.pair, "status": pair_status(state), "exit_code": pair_exit_code(state)}
