"""`replica-audit prune`: delete old runs under OUT by a retention policy (audit/retention.py, audit/prune.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from audit.cli.options import OutOpt, err, out
from audit.outcome import EXIT_OK, EXIT_USAGE

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
    from audit.prune import describe_total, plan_prunes
    from audit.retention import Policy

    policy = Policy(keep_days, keep_snapshot_days, keep_last, keep_unfinished_days)
    plans = plan_prunes(out_dir, policy)
    total, failed = 0, []
    for plan in plans:
        freed, plan_failed = _prune_one(plan, dry_run)
        total += freed
        failed += plan_failed
    out.print(escape(describe_total(total, plans[0].out, dry_run)))
    for path, why in failed:
        err.print(f"[red]could not delete[/] {escape(str(path))}: {escape(why)}")
    raise typer.Exit(EXIT_USAGE if failed else EXIT_OK)


def _prune_one(plan: Plan, dry_run: bool) -> tuple[int, list[tuple[Path, str]]]:
    """Apply (or only show) one output directory's plan and say what it did: (bytes freed, paths that failed)."""
    from audit.prune import DONE, apply_prune, describe, preview

    result = preview(plan) if dry_run else apply_prune(plan)
    for kind, sentence in describe(plan, result, dry_run):
        (out if kind == DONE else err).print(escape(sentence))
    return sum(result.freed.values()), result.failed
