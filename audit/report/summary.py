"""summary.json: per pair, counts per category, diagnoses, coverage, skipped checks and the gate verdict."""

from __future__ import annotations

import json
from typing import Any

import pyarrow.dataset as ds

from audit import defaults
from audit.diagnose import meaning
from audit.inventory import Pair
from audit.layout import RunDir

COVERAGE_KEYS = (
    "master_keys",
    "replica_keys",
    "keys_compared",
    "master_keys_unreadable",
    "replica_keys_unreadable",
    "master_scan_duplicates",
    "replica_scan_duplicates",
    "master_keys_vanished",
    "replica_keys_vanished",
    "recheck_candidates",
    "recheck_converged",
    "recheck_in_flight",
    "recheck_unrechecked",
    # Pika binlogs
    "master_binlog_files",
    "replica_binlog_files",
    "master_binlog_bytes",
    "replica_binlog_bytes",
    "master_binlog_records",
    "replica_binlog_records",
    "binlog_records_aligned",
    "binlog_records_shifted",
    "binlog_unreplicated_records",
    "binlog_unreplicated_bytes",
    # RocketMQ commit logs
    "master_files",
    "replica_files",
    "master_bytes",
    "replica_bytes",
    "master_records",
    "replica_records",
    "common_bytes",
    "bytes_compared",
    "bytes_not_compared",
    "chunks_equal",
    "chunks_different",
    "master_records_compared",
    "replica_records_compared",
    "master_damaged_records",
    "replica_damaged_records",
)


def display_key(key: bytes | None) -> str | None:
    """Printable UTF-8 as is; anything else as 0x-hex (binary-safe, never mangled)."""
    if key is None:
        return None
    try:
        text = key.decode("utf-8")
        if text.isprintable():
            return text if len(text) <= 200 else text[:200] + "…"
    except UnicodeDecodeError:
        pass
    return "0x" + key[:100].hex() + ("…" if len(key) > 100 else "")


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


def pair_status(state: dict[str, Any]) -> str:
    """passed | failed (the gate's verdict) | error (a source could not be audited) | incomplete (no gate yet)."""
    gate = state.get("gate")
    if state.get("error"):
        return "error"
    if gate is None:
        return "incomplete"
    return "passed" if gate["success"] else "failed"


def pair_verdict(run: RunDir, pair: str) -> dict[str, Any]:
    """A pair's verdict in this run, small enough for an Airflow asset event: status, counts, failed checks."""
    state = run.load_state(pair)
    gate = state.get("gate") or {}
    error = state.get("error") or {}
    return {
        "run_id": run.run_id,
        "pair": pair,
        "status": pair_status(state),
        "divergences": sum(int(n) for n in state.get("counts", {}).values()),
        "counts": {c: int(n) for c, n in sorted(state.get("counts", {}).items())},
        "failed_checks": sorted({str(f.get("column")) for f in gate.get("failed", [])}),
        "keys_compared": state.get("metrics", {}).get("keys_compared"),
        "error": error.get("message"),
    }


def pair_summary(run: RunDir, pair: Pair, per_category: int) -> dict[str, Any]:
    state = run.load_state(pair.name)
    gate = state.get("gate")
    status = pair_status(state)
    sample, diagnoses = findings_sample(run, pair.name, per_category)
    metrics = state.get("metrics", {})
    skipped = {name: c["reason"] for name, c in state.get("checks", {}).items() if c.get("status") == "skipped"}
    not_covered = []
    unreadable = int(metrics.get("master_keys_unreadable", 0)) + int(metrics.get("replica_keys_unreadable", 0))
    if unreadable:
        not_covered.append(f"{unreadable} keys could not be read (see snapshots/*/snapshot.json errors_sample)")
    if metrics.get("recheck_unrechecked"):
        not_covered.append(
            f"{metrics['recheck_unrechecked']} divergent keys reported without a live recheck (over recheck_max_keys)"
        )
    if status in ("error", "incomplete"):
        not_covered.append(state.get("error", {}).get("message", "the audit did not finish"))
    return {
        "pair": pair.name,
        "kind": pair.kind,
        "status": status,
        "servers": state.get("servers", {}),
        "dbs": state.get("dbs"),
        "checks": state.get("checks", {}),
        "skipped_checks": skipped,
        "not_covered": not_covered,
        "coverage": {k: metrics[k] for k in COVERAGE_KEYS if k in metrics},
        "metrics": metrics,
        "counts": state.get("counts", {}),
        "diagnoses": {code: {"count": n, "meaning": meaning(code)} for code, n in sorted(diagnoses.items())},
        "gate": gate,
        "error": state.get("error"),
        "findings_sample": sample,
        "replication_samples": state.get("replication_samples", []),
    }


def build_summary(run: RunDir, pairs: list[Pair], per_category: int = defaults.FINDINGS_SAMPLE) -> dict[str, Any]:
    from audit.pipeline import exit_code_for

    summaries = [pair_summary(run, p, per_category) for p in pairs]
    code = exit_code_for(["error" if s["status"] == "incomplete" else s["status"] for s in summaries])
    return {
        "run_id": run.run_id,
        "verdict": {0: "passed", 1: "failed", 3: "incomplete"}[code],
        "exit_code": code,
        "pairs": summaries,
    }
