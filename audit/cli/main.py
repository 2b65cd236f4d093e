"""`replica-audit run|snapshot|diff|recheck|gate|report`.

Exit status (DESIGN.md): 0 every gate passed; 1 a gate failed; 2 usage or configuration error;
3 a source could not be audited (unreachable, unreadable, or the audit could not complete);
4 an internal error (a bug: the traceback is printed for the report).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from audit.errors import AuditError, ConfigError, SourceError, StageInputError
from audit.inventory import Inventory, Pair, load_inventory
from audit.pipeline import EXIT_SOURCE, EXIT_USAGE, audit_pair, finish_run, run_stage, start_run

EXIT_INTERNAL = 4

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Audit whether replicas really hold what their masters hold.",
)
_WIDTH = None if sys.stdout.isatty() else 140  # logs and pipes get a readable table, not 80 columns
out = Console(width=_WIDTH)
err = Console(stderr=True, width=_WIDTH)

InventoryOpt = Annotated[Path, typer.Option("--inventory", "-i", help="inventory YAML")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="output directory; each run writes OUT/<run_id>/")]
PairOpt = Annotated[list[str] | None, typer.Option("--pair", "-p", help="audit only this pair (repeatable)")]
RunIdOpt = Annotated[str | None, typer.Option("--run-id", help="the run to continue (stages after snapshot)")]
SparkMasterOpt = Annotated[str | None, typer.Option("--spark-master", help="Spark master URL (default local[*])")]
SparkConfOpt = Annotated[list[str] | None, typer.Option("--spark-conf", help="extra Spark setting key=value")]
HistoryOpt = Annotated[
    str | None,
    typer.Option(
        "--history",
        help="results history store: sqlite:///path or mysql://user:pw@host:port/db "
        "(default $REPLICA_AUDIT_HISTORY, else OUT/history.sqlite)",
    ),
]


def _setup(
    inventory: Path, pairs: list[str] | None, spark_master: str | None, spark_conf: list[str] | None
) -> tuple[Inventory, list[Pair]]:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    inv = load_inventory(inventory)
    conf = {}
    for item in spark_conf or []:
        if "=" not in item:
            raise ConfigError(f"--spark-conf {item!r}: expected key=value")
        k, v = item.split("=", 1)
        conf[k] = v
    from audit.diff.spark import configure

    configure(spark_master, conf)
    return inv, inv.select(pairs)


def _progress() -> tuple[Any, Any]:
    """A rich progress bar on a terminal; nothing otherwise (logs and CI stay clean)."""
    if not sys.stdout.isatty():
        return None, None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=out,
        transient=True,
    )
    tasks: dict[str, Any] = {}

    def advance(label: str, n: int, total: int | None) -> None:
        if label not in tasks:
            tasks[label] = bar.add_task(label, total=total)
        bar.update(tasks[label], advance=n)

    return bar, advance


def _print_summary(summary: dict[str, Any], run_root: Path) -> None:
    from audit.cli.render import print_summary

    print_summary(out, summary, run_root)


@app.command()
def run(
    inventory: InventoryOpt,
    out_dir: OutOpt,
    pair: PairOpt = None,
    run_id: RunIdOpt = None,
    spark_master: SparkMasterOpt = None,
    spark_conf: SparkConfOpt = None,
    history: HistoryOpt = None,
) -> None:
    """Run the whole pipeline for every pair (or the --pair ones) and print a summary."""
    inv, pairs = _setup(inventory, pair, spark_master, spark_conf)
    run_dir = start_run(inv, out_dir, run_id)
    out.print(f"run [bold]{run_dir.run_id}[/] → {run_dir.root}")
    bar, advance = _progress()
    if bar is not None:
        bar.start()
    try:
        for p in pairs:
            outcome = audit_pair(
                p, run_dir, progress=advance, on_stage=lambda name, stage: err.print(f"[dim]{name}: {stage}[/]")
            )
            if outcome.status == "error":
                err.print(f"[red]{p.name}: could not be audited:[/] {outcome.message}")
    finally:
        if bar is not None:
            bar.stop()
    summary = finish_run(inv, run_dir, pairs, history)
    _print_summary(summary, run_dir.root)
    raise typer.Exit(summary["exit_code"])


def _stage(
    stage: str,
    inventory: Path,
    out_dir: Path,
    pairs: list[str] | None,
    run_id: str | None,
    spark_master: str | None = None,
    spark_conf: list[str] | None = None,
) -> None:
    inv, selected = _setup(inventory, pairs, spark_master, spark_conf)
    if run_id is None and stage != "snapshot":
        raise ConfigError(f"{stage}: --run-id is required (the run whose snapshots to use)")
    run_dir = start_run(inv, out_dir, run_id)
    failed = False
    for p in selected:
        try:
            verdict = run_stage(stage, p, run_dir)
            if verdict is not None and not verdict["success"]:
                failed = True
        except SourceError as e:
            err.print(f"[red]{p.name}: could not be audited:[/] {e}")
            raise typer.Exit(EXIT_SOURCE) from None
    out.print(f"{stage}: done for {', '.join(p.name for p in selected)}; run_id {run_dir.run_id}")
    if failed:
        raise typer.Exit(1)


@app.command()
def snapshot(inventory: InventoryOpt, out_dir: OutOpt, pair: PairOpt = None, run_id: RunIdOpt = None) -> None:
    """Stage 1: snapshot both sides of each pair (prints the run id the next stages need)."""
    _stage("snapshot", inventory, out_dir, pair, run_id)


@app.command()
def diff(
    inventory: InventoryOpt,
    out_dir: OutOpt,
    run_id: RunIdOpt = None,
    pair: PairOpt = None,
    spark_master: SparkMasterOpt = None,
    spark_conf: SparkConfOpt = None,
) -> None:
    """Stage 2: Spark diff of the snapshots."""
    _stage("diff", inventory, out_dir, pair, run_id, spark_master, spark_conf)


@app.command()
def recheck(inventory: InventoryOpt, out_dir: OutOpt, run_id: RunIdOpt = None, pair: PairOpt = None) -> None:
    """Stage 3: re-read diverged keys live, check replication state, diagnose, write findings."""
    _stage("recheck", inventory, out_dir, pair, run_id)


@app.command()
def gate(inventory: InventoryOpt, out_dir: OutOpt, run_id: RunIdOpt = None, pair: PairOpt = None) -> None:
    """Stage 4: validate the findings with the kind's Great Expectations suite (exit 1 if it fails)."""
    _stage("gate", inventory, out_dir, pair, run_id)


@app.command()
def report(
    inventory: InventoryOpt, out_dir: OutOpt, run_id: RunIdOpt = None, pair: PairOpt = None, history: HistoryOpt = None
) -> None:
    """Stage 5: write summary.json and report.html, print the summary; exit status as for `run`."""
    inv, pairs = _setup(inventory, pair, None, None)
    if run_id is None:
        raise ConfigError("report: --run-id is required")
    run_dir = start_run(inv, out_dir, run_id)
    summary = finish_run(inv, run_dir, pairs, history)
    _print_summary(summary, run_dir.root)
    raise typer.Exit(summary["exit_code"])


@app.command()
def verify(
    source: Annotated[str, typer.Option("--source", help="source URL, or conn:<airflow_conn_id>")],
    target: Annotated[str, typer.Option("--target", help="target URL, or conn:<airflow_conn_id>")],
    out_dir: OutOpt,
    kind: Annotated[str, typer.Option("--kind", help="redis | pika")] = "redis",
    strictness: Annotated[
        str, typer.Option("--strictness", help="zero_tolerance | allow_ttl_drift | allow_extra_on_target")
    ] = "zero_tolerance",
    db: Annotated[list[int] | None, typer.Option("--db", help="only this db (repeatable; default all)")] = None,
    name: Annotated[str, typer.Option("--name", help="the pair's name in the outputs")] = "migration",
    setting: Annotated[
        list[str] | None, typer.Option("--setting", help="inventory setting key=value, e.g. qps=5000 (repeatable)")
    ] = None,
    run_id: RunIdOpt = None,
    history: HistoryOpt = None,
) -> None:
    """Post-migration verification of SOURCE against TARGET: zero tolerance by default, full coverage, and a
    verification certificate (certificate.json / certificate.html). Exit 0 only when the certificate passes."""
    import yaml

    from audit.verify import finish_verification, verification_inventory

    settings: dict[str, Any] = {}
    for item in setting or []:
        if "=" not in item:
            raise ConfigError(f"--setting {item!r}: expected key=value")
        k, v = item.split("=", 1)
        settings[k] = yaml.safe_load(v)
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    inv = verification_inventory(source, target, kind, strictness, db, name=name, settings=settings)
    run_dir = start_run(inv, out_dir, run_id)
    out.print(f"verification [bold]{run_dir.run_id}[/] → {run_dir.root}")
    outcome = audit_pair(inv.pairs[0], run_dir, on_stage=lambda n, stage: err.print(f"[dim]{n}: {stage}[/]"))
    if outcome.status == "error":
        err.print(f"[red]{name}: could not be verified:[/] {outcome.message}")
    cert = finish_verification(inv, run_dir, strictness=strictness, history=history)
    _print_summary(json.loads(run_dir.summary.read_text()), run_dir.root)
    for reason in cert["reasons"]:
        out.print(f"  {reason}")
    out.print(
        f"certificate: {run_dir.root / 'certificate.json'} ([bold]{cert['verdict']}[/]; digests "
        f"{'equal' if cert['digests_equal'] else 'differ'})"
    )
    raise typer.Exit({"passed": 0, "failed": 1}.get(cert["verdict"], EXIT_SOURCE))


@app.command("daily-report")
def daily_report(
    out_dir: OutOpt,
    history: HistoryOpt = None,
    days: Annotated[int, typer.Option("--days", help="how many days back")] = 7,
    as_of: Annotated[str | None, typer.Option("--as-of", help="end of the window, ISO date/time (default now)")] = None,
) -> None:
    """Render OUT/reports/daily-<date>.html from the results history: trends per pair over the last days."""
    from audit.report.daily import render_daily_report

    path = render_daily_report(out_dir, history, days, as_of)
    out.print(f"daily report: {path}")


def main() -> None:
    """Entry point: maps the AuditError tree to exit codes; an operator's mistake never shows a traceback."""
    try:
        code = app(standalone_mode=False)  # click returns, rather than raises, the Exit code here
        sys.exit(code if isinstance(code, int) else 0)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (ConfigError, StageInputError) as e:
        err.print(f"[red]error:[/] {e}")
        sys.exit(EXIT_USAGE)
    except AuditError as e:
        err.print(f"[red]could not audit:[/] {e}")
        sys.exit(EXIT_SOURCE)
    except Exception as e:  # click's own usage errors first, then real bugs
        import click

        if isinstance(e, click.exceptions.ClickException):
            e.show()
            sys.exit(EXIT_USAGE)
        if isinstance(e, click.exceptions.Abort):
            sys.exit(130)
        traceback.print_exc()
        err.print(f"[red]internal error[/] (a bug in replica-audit; please report it): {e}")
        sys.exit(EXIT_INTERNAL)
