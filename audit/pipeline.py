"""The audit as stages over a run directory. The CLI and the Airflow operators call these, nothing else.

Each stage reads what the previous one left under DIR/<run_id>/ and records its own results in the
pair's state, so the stages can run in one process (`replica-audit run`) or as separate tasks on
different workers (Airflow), given a shared output directory.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from audit.errors import AuditError, SourceError
from audit.inventory import ConnResolver, Inventory, Pair, display_endpoint
from audit.layout import RunDir, new_run_id, write_json
from audit.sources import source_for
from audit.sources.base import Progress

STAGES = ("snapshot", "diff", "recheck", "gate")

EXIT_OK, EXIT_GATE_FAILED, EXIT_USAGE, EXIT_SOURCE = 0, 1, 2, 3


def tool_version() -> str:
    try:
        return version("replica-audit")
    except PackageNotFoundError:
        return "0+unknown"


def start_run(inventory: Inventory, out: Path, run_id: str | None = None) -> RunDir:
    run = RunDir(Path(out), run_id or new_run_id())
    run.root.mkdir(parents=True, exist_ok=True)
    if not run.manifest.exists():
        write_json(
            run.manifest,
            {
                "run_id": run.run_id,
                "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "inventory_digest": inventory.digest,
                "tool_version": tool_version(),
                "pairs": {
                    p.name: {
                        "kind": p.kind,
                        "master": display_endpoint(p.master),
                        "replica": display_endpoint(p.replica),
                    }
                    for p in inventory.pairs
                },
            },
        )
    return run


def run_stage(
    stage: str, pair: Pair, run: RunDir, resolver: ConnResolver | None = None, progress: Progress | None = None
) -> dict[str, Any] | None:
    """Run one stage for one pair. A source failure is recorded in the pair's state, then re-raised."""
    source = source_for(pair.kind)
    try:
        if stage == "snapshot":
            source.snapshot(pair, run, resolver, progress)
        elif stage == "diff":
            source.diff(pair, run)
        elif stage == "recheck":
            source.recheck(pair, run, resolver)
        elif stage == "gate":
            from audit.gate.verdict import gate_pair

            return gate_pair(run, pair, source.SUITE)
        else:
            raise ValueError(f"unknown stage {stage}")
    except SourceError as e:
        record_error(run, pair, stage, e)
        raise
    return None


def record_error(run: RunDir, pair: Pair, stage: str, error: AuditError) -> None:
    state = run.load_state(pair.name)
    state["error"] = {
        "stage": stage,
        "message": str(error),
        "where": getattr(error, "where", ""),
        "type": type(error).__name__,
    }
    run.save_state(pair.name, state)


@dataclass(frozen=True)
class PairOutcome:
    pair: str
    status: str  # passed | failed | error
    message: str = ""


def audit_pair(
    pair: Pair,
    run: RunDir,
    resolver: ConnResolver | None = None,
    progress: Progress | None = None,
    on_stage: Callable[[str, str], None] | None = None,
) -> PairOutcome:
    """All stages for one pair. Source errors end this pair only; they become its outcome."""
    try:
        verdict = None
        for stage in STAGES:
            if on_stage is not None:
                on_stage(pair.name, stage)
            verdict = run_stage(stage, pair, run, resolver, progress)
    except SourceError as e:
        return PairOutcome(pair.name, "error", str(e))
    assert verdict is not None
    return PairOutcome(pair.name, "passed" if verdict["success"] else "failed")


def finish_run(inventory: Inventory, run: RunDir, pairs: list[Pair], history: str | None = None) -> dict[str, Any]:
    """summary.json, report.html, the manifest's end, and the run appended to the results history.

    `history` is the store's URL; None means $REPLICA_AUDIT_HISTORY, else `<out>/history.sqlite`. A
    history store that cannot be written is recorded in the manifest; it never changes the verdict.
    """
    from audit.report.html import render_report
    from audit.report.summary import build_summary

    summary = build_summary(run, pairs)
    write_json(run.summary, summary)
    manifest: dict[str, Any] = {}
    if run.manifest.exists():
        import json

        manifest = json.loads(run.manifest.read_text())
    manifest["ended_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    manifest["servers"] = {p["pair"]: p.get("servers", {}) for p in summary["pairs"]}
    manifest["exit_code"] = summary["exit_code"]
    write_json(run.manifest, manifest)
    render_report(run, summary)  # after the manifest's end, which the report shows
    manifest["history"] = record_history(run, history)
    write_json(run.manifest, manifest)
    return summary


def record_history(run: RunDir, url: str | None) -> dict[str, Any]:
    import os

    from audit.history import ENV_VAR, open_history
    from audit.history.store import shown_url

    url = url if url is not None else os.environ.get(ENV_VAR)
    try:
        with open_history(url, out=run.out) as store:
            rows = store.append_run(run.root)
            return {"status": "appended", "store": store.where, "rows": rows}
    except AuditError as e:
        return {"status": "error", "store": shown_url(url) if url else "default", "message": str(e)}


def exit_code_for(pair_statuses: list[str]) -> int:
    if any(s == "error" for s in pair_statuses):
        return EXIT_SOURCE
    if any(s != "passed" for s in pair_statuses):
        return EXIT_GATE_FAILED
    return EXIT_OK
