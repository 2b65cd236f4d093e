"""`replica-audit prune`: delete old runs under OUT by a retention policy (audit/retention.py, audit/prune.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from audit.cli.options import OutOpt, err, out
from audit.outcome import EXIT_OK, EXIT_USAGE
from audit.report.charts import format_bytes  # matplotlib loads only when a chart is drawn

if TYPE_CHECKING:
    from audit.prune import Plan


def prune(
    out_dir: OutOpt,
    keep_days: Annotated[
        float | None,
        typer.Option("--keep-days", help="delete whole runs that ended more than N days ago (their GX results too)"),
    ] = None,
    keep_snapshot_days: Annotated[
        float | None,
        typer.Option(
            "--keep-snapshot-days",
            help="delete the snapshots and work files of runs that ended more than N days ago (results stay)",
        ),
    ] = None,
    keep_last: Annotated[
        int, typer.Option("--keep-last", help="always keep the N newest finished runs whole (at least 1)")
    ] = 1,
    keep_unfinished_days: Annotated[
        float | None,
        typer.Option(
            "--keep-unfinished-days",
            help="delete unfinished runs (killed, never resumed) that started more than N days ago (default: never)",
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print what would be deleted; delete nothing")] = False,
) -> None:
    """Delete old runs under OUT: whole runs past --keep-days, their bulky parts past --keep-snapshot-days.

    Only finished runs (their manifest has an end) are touched, unless --keep-unfinished-days is given,
    never the newest, and never anything outside OUT; OUT/verifications (verification runs) is pruned
    alike; the results history keeps every run's rows (README "Retention"). Exit 2 for a bad value, or
    when a path could not be deleted (it is named)."""
    from audit.prune import plan_prunes
    from audit.retention import Policy

    policy = Policy(keep_days, keep_snapshot_days, keep_last, keep_unfinished_days)
    plans = plan_prunes(out_dir, policy)
    total, failed = 0, []
    for plan in plans:
        freed, plan_failed = _prune_one(plan, dry_run)
        total += freed
        failed += plan_failed
    out.print(escape(f"{'would free' if dry_run else 'freed'} {format_bytes(total)} ({total} bytes) in {plans[0].out}"))
    for path, why in failed:
        err.print(f"[red]could not delete[/] {escape(str(path))}: {escape(why)}")
    raise typer.Exit(EXIT_USAGE if failed else EXIT_OK)


def _prune_one(plan: Plan, dry_run: bool) -> tuple[int, list[tuple[Path, str]]]:
    """Apply (or only show) one output directory's plan and say what it did: (bytes freed, paths that failed)."""
    from audit.prune import Result, apply_prune, docs_index, size_of

    if dry_run:
        verb, result = "would delete", Result({r: sum(size_of(p) for p in paths) for r, paths in plan.paths.items()})
    else:
        verb, result = "deleted", apply_prune(plan)
    freed = result.freed
    for run_id in (r for r in plan.decision.delete if r in freed):
        out.print(escape(f"{verb} run {plan.name(run_id)} ({format_bytes(freed[run_id])})"))
    for run_id in (r for r in plan.decision.trim if r in freed):
        out.print(escape(f"{verb} snapshots and work files of run {plan.name(run_id)} ({format_bytes(freed[run_id])})"))
    for run_id, why in {**plan.decision.keep, **result.left}.items():
        err.print(escape(f"kept {plan.name(run_id)}: {why}"))
    for note in plan.notes:
        err.print(escape(f"not pruned: {note}"))
    index = docs_index(plan.out)
    if result.index_dropped:
        rows = f"{result.index_dropped} row{'s' if result.index_dropped > 1 else ''}"
        out.print(escape(f"dropped {rows} of deleted results from the Data Docs index {index}"))
    if result.index_left:
        err.print(escape(f"Data Docs index {index}: {result.index_left}; the next gate rebuilds it"))
    return sum(freed.values()), result.failed
