"""`replica-audit` run|snapshot|diff|recheck|gate|report|verify here; daily-report, prune, spark-server beside.

Exit status (audit/outcome.py, README "Exit status"): 0 every gate passed; 1 a gate failed; 2 usage or
configuration error; 3 a source could not be audited; 4 an internal error (a bug: its traceback is
printed); 130/143 interrupted by SIGINT/SIGTERM (audit/cli/interrupt.py). Output: a summary table on
stdout, or with `--json` the summary as JSON and nothing else; progress and per-stage lines on stderr,
silenced by `--quiet`.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from typer.exceptions import TyperException

from audit.cli import interrupt
from audit.cli.daily_report import daily_report
from audit.cli.options import (
    HistoryOpt,
    InventoryOpt,
    JsonOpt,
    NewRunIdOpt,
    OutOpt,
    PairOpt,
    QuietOpt,
    RunIdOpt,
    SnapshotRunIdOpt,
    SparkConfOpt,
    SparkMasterOpt,
    err,
    key_values,
    out,
    spark_settings,
)
from audit.cli.prune import prune
from audit.cli.spark_server import spark_server
from audit.errors import AuditError, ConfigError
from audit.history import check_history_url
from audit.inventory import Inventory, Pair, load_inventory
from audit.kernel.kind import kind_spec
from audit.layout import RunDir
from audit.outcome import EXIT_INTERNAL, EXIT_USAGE, exit_code_of_error, run_exit_code
from audit.pipeline import audit_pair, finish_run, run_stage, start_run, tool_version

app = typer.Typer(
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Audit whether replicas really hold what their masters hold.",
)


class _Output:
    """What the user asked to see: the table (default), JSON only (--json), nothing on stderr (--quiet)."""

    json = False
    quiet = False


def _version(value: bool) -> None:
    if value:
        out.print(f"replica-audit {tool_version()}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """Audit whether replicas really hold what their masters hold."""


def _output(as_json: bool, quiet: bool) -> None:
    _Output.json, _Output.quiet = as_json, quiet


def _say(text: str) -> None:
    """A line about what is happening: on stderr, unless --quiet."""
    if not _Output.quiet:
        err.print(text)


def _setup(
    inventory: Path, pairs: list[str] | None, spark_master: str | None, spark_conf: list[str] | None
) -> tuple[Inventory, list[Pair]]:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    inv = load_inventory(inventory)
    _configure_spark(spark_master, spark_conf)
    return inv, inv.select(pairs)


def _configure_spark(spark_master: str | None, spark_conf: list[str] | None) -> None:
    from audit.diff.spark import configure

    configure(spark_master, spark_settings(spark_conf))


def _progress() -> tuple[Any, Any]:
    """A rich progress bar on a terminal; nothing otherwise (logs and CI stay clean)."""
    if _Output.quiet or _Output.json or not sys.stderr.isatty():
        return None, None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    )
    tasks: dict[str, Any] = {}

    def advance(label: str, n: int, total: int | None) -> None:
        if label not in tasks:
            tasks[label] = bar.add_task(label, total=total)
        bar.update(tasks[label], advance=n)

    return bar, advance


def _print_summary(summary: dict[str, Any], run_root: Path, **wording: Callable[..., str]) -> None:
    """`wording`: print_summary's `prose` and `said` (a verification's words for the sides)."""
    _say_history(summary.pop("history", None) or {}, run_root)
    if _Output.json:
        sys.stdout.write(json.dumps(summary, sort_keys=True, default=str) + "\n")
        return
    if _Output.quiet:
        return
    from audit.cli.render import print_summary

    print_summary(out, summary, run_root, **wording)


def _say_history(history: dict[str, Any], run_root: Path, again: bool = True) -> None:
    """A history store that could not take the run, on stderr whatever the output mode: the verdict stands,
    and the daily report lacks the run until it is appended. `again`: a `report` of the run can append it
    later (a verification has no inventory to give it)."""
    if history.get("status") != "error":
        return
    later = (
        f"; append it later with `replica-audit report --run-id {run_root.name}` (same --inventory, --out "
        "and --history)"
        if again
        else ""
    )
    err.print(
        f"[yellow]results history {escape(str(history.get('store')))}: not written:[/] "
        f"{escape(str(history.get('message')) + later)}"
    )


def _warm_up(spark: bool) -> None:
    """What the last stages need, loaded while the first ones wait (audit/background.py): the Spark
    session, then GX's modules (the gate), then matplotlib's (the report), one after the other."""
    from audit.diff.spark import warm_up as spark_warm_up
    from audit.gate import gx
    from audit.report import charts

    charts.PRELOAD.start(after=gx.PRELOAD.start(after=spark_warm_up() if spark else None))


def _audit(
    inv: Inventory, pairs: list[Pair], out_dir: Path, run_id: str | None, resume: bool, history: str | None
) -> None:
    run_dir = start_run(inv, out_dir, run_id, reopen=resume, new=not resume)
    _say(f"run [bold]{run_dir.run_id}[/] → {run_dir.root}")
    try:
        _warm_up(any(kind_spec(p.kind).uses_spark for p in pairs))
        bar, advance = _progress()
        if bar is not None:
            bar.start()
        try:
            _audit_pairs(pairs, run_dir, advance, resume)
        finally:
            if bar is not None:
                bar.stop()
        summary = finish_run(inv, run_dir, pairs, history)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (audit/cli/interrupt.py)
        interrupt.say(
            f"run {escape(run_dir.run_id)} is kept as far as it got; "
            f"`replica-audit run --resume {escape(run_dir.run_id)}` (same --inventory and --out) goes on with it"
        )
        raise
    _print_summary(summary, run_dir.root)
    raise typer.Exit(summary["exit_code"])


def _audit_pairs(pairs: list[Pair], run_dir: RunDir, advance: Any, resume: bool) -> None:
    for p in pairs:
        outcome = audit_pair(
            p,
            run_dir,
            progress=advance,
            resume=resume,
            on_stage=lambda name, stage: _say(f"[dim]{name}: {stage}[/]"),
        )
        if outcome.exit_code == EXIT_INTERNAL:
            state = run_dir.load_state(p.name)
            if state is not None and state.error is not None and state.error.traceback:
                err.print(state.error.traceback, markup=False, highlight=False)
            err.print(
                f"[red]{p.name}: internal error[/] (a bug in replica-audit; please report it): "
                f"{escape(outcome.message)}"
            )
        elif outcome.status == "error":
            err.print(f"[red]{p.name}: could not be audited:[/] {escape(outcome.message)}")


@app.command()
def run(
    inventory: InventoryOpt,
    out_dir: OutOpt,
    pair: PairOpt = None,
    run_id: NewRunIdOpt = None,
    resume: Annotated[
        str | None,
        typer.Option("--resume", help="go on with run RUN_ID from each pair's last completed stage"),
    ] = None,
    spark_master: SparkMasterOpt = None,
    spark_conf: SparkConfOpt = None,
    history: HistoryOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Run the whole pipeline for every pair (or the --pair ones) and print a summary."""
    _output(as_json, quiet)
    check_history_url(history)
    if resume and run_id and resume != run_id:
        raise ConfigError("--resume RUN_ID and --run-id name different runs; give one")
    if resume and not RunDir(out_dir, resume).manifest.is_file():
        raise ConfigError(f"--resume {resume}: no such run in {out_dir}")
    if not resume:
        _new_run(out_dir, run_id, f"--resume {run_id} goes on with it, or give a new id")
    inv, pairs = _setup(inventory, pair, spark_master, spark_conf)
    _audit(inv, pairs, out_dir, resume or run_id, resume is not None, history)


def _new_run(out_dir: Path, run_id: str | None, instead: str) -> None:
    """A second run under one id would mix its results with the first's (manifest, states, history)."""
    if run_id and RunDir(out_dir, run_id).manifest.is_file():
        raise ConfigError(f"--run-id {run_id}: a run of that id is already in {out_dir}; {instead}")


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
    if stage != "snapshot":
        _existing_run(stage, out_dir, run_id)
    run_dir = start_run(inv, out_dir, run_id)
    codes = []
    done, failed = [], []
    for p in selected:
        try:
            verdict = run_stage(stage, p, run_dir)
            codes.append(0 if verdict is None or verdict.success else 1)
            done.append(p.name)
        except Exception as e:
            code = exit_code_of_error(e)
            if code == EXIT_INTERNAL:
                traceback.print_exc()
            err.print(f"[red]{p.name}: {stage} failed:[/] {escape(str(e))}")
            codes.append(code)
            failed.append(p.name)
    said = [f"done for {', '.join(done)}"] if done else []
    said += [f"failed for {', '.join(failed)}"] if failed else []
    err.print(escape(f"{stage}: {'; '.join(said)}; run_id {run_dir.run_id}"))
    if stage == "snapshot":  # the id alone on stdout, never wrapped: RID=$(replica-audit snapshot ...)
        sys.stdout.write(f"{run_dir.run_id}\n")
    raise typer.Exit(run_exit_code(codes))


def _existing_run(stage: str, out_dir: Path, run_id: str | None) -> None:
    """A stage after the snapshot continues a run: one that is not there is a mistake, not a new run."""
    if run_id is None:
        raise ConfigError(f"{stage}: --run-id is required (the run whose earlier stages to use)")
    if not RunDir(out_dir, run_id).manifest.is_file():
        raise ConfigError(f"{stage}: --run-id {run_id}: no such run in {out_dir}")


@app.command()
def snapshot(
    inventory: InventoryOpt,
    out_dir: OutOpt,
    pair: PairOpt = None,
    run_id: SnapshotRunIdOpt = None,
    spark_master: SparkMasterOpt = None,
    spark_conf: SparkConfOpt = None,
) -> None:
    """Stage 1: snapshot both sides of each pair (prints the run id the next stages need).

    Some kinds snapshot in Spark jobs (a Pika binlog scan, a Redis Cluster's shards): hence the Spark
    options."""
    _stage("snapshot", inventory, out_dir, pair, run_id, spark_master, spark_conf)


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
def recheck(
    inventory: InventoryOpt,
    out_dir: OutOpt,
    run_id: RunIdOpt = None,
    pair: PairOpt = None,
    spark_master: SparkMasterOpt = None,
    spark_conf: SparkConfOpt = None,
) -> None:
    """Stage 3: re-read diverged keys live, check replication state, diagnose, write findings.

    Some kinds re-read in Spark jobs: hence the Spark options."""
    _stage("recheck", inventory, out_dir, pair, run_id, spark_master, spark_conf)


@app.command()
def gate(inventory: InventoryOpt, out_dir: OutOpt, run_id: RunIdOpt = None, pair: PairOpt = None) -> None:
    """Stage 4: validate the findings with the kind's Great Expectations suite (exit 1 if it fails)."""
    _stage("gate", inventory, out_dir, pair, run_id)


@app.command()
def report(
    inventory: InventoryOpt,
    out_dir: OutOpt,
    run_id: RunIdOpt = None,
    pair: PairOpt = None,
    history: HistoryOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Stage 5: write summary.json and report.html, print the summary; exit status as for `run`."""
    _output(as_json, quiet)
    check_history_url(history)
    inv, pairs = _setup(inventory, pair, None, None)
    _existing_run("report", out_dir, run_id)
    run_dir = start_run(inv, out_dir, run_id)
    summary = finish_run(inv, run_dir, pairs, history)
    _print_summary(summary, run_dir.root)
    raise typer.Exit(summary["exit_code"])


@app.command()
def verify(
    source: Annotated[
        str,
        typer.Option("--source", help="source URL, conn:<airflow_conn_id>, or a mapping {url: ..., topology: cluster}"),
    ],
    target: Annotated[
        str,
        typer.Option("--target", help="target URL, conn:<airflow_conn_id>, or a mapping {url: ..., topology: cluster}"),
    ],
    out_dir: OutOpt,
    kind: Annotated[str, typer.Option("--kind", help="a kind that can be verified: redis, pika, ...")] = "redis",
    strictness: Annotated[
        str, typer.Option("--strictness", help="zero_tolerance | allow_ttl_drift | allow_extra_on_target")
    ] = "zero_tolerance",
    db: Annotated[
        list[int] | None,
        typer.Option(
            "--db",
            help="only this db (repeatable; default: every db either side has keys in; db 0 for Pika, "
            "or with a cluster or sentinel side)",
        ),
    ] = None,
    table: Annotated[
        list[str] | None, typer.Option("--table", help="schema.table or schema.* (repeatable; kinds with tables)")
    ] = None,
    name: Annotated[str, typer.Option("--name", help="the pair's name in the outputs")] = "migration",
    setting: Annotated[
        list[str] | None,
        typer.Option("--setting", help="inventory setting key=value, e.g. max_keys_per_s=20000 (repeatable)"),
    ] = None,
    option: Annotated[
        list[str] | None,
        typer.Option("--option", help="other pair field key=value (YAML value), e.g. compare=keys (repeatable)"),
    ] = None,
    run_id: NewRunIdOpt = None,
    history: HistoryOpt = None,
    spark_master: SparkMasterOpt = None,
    spark_conf: SparkConfOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Post-migration verification of SOURCE against TARGET (exit 0 only when the certificate passes).

    Zero tolerance by default, full coverage, and a verification certificate (certificate.json /
    certificate.html)."""
    from audit.verify import finish_verification, in_verification_prose, in_verification_terms, verification_inventory

    _output(as_json, quiet)
    check_history_url(history)
    given = {flag: key_values(flag, items) for flag, items in (("--setting", setting), ("--option", option))}
    _new_run(out_dir, run_id, "give a new id")  # a certificate must be one verification's
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    _configure_spark(spark_master, spark_conf)
    inv = verification_inventory(
        source,
        target,
        kind,
        strictness,
        db,
        tables=table,
        name=name,
        settings=given["--setting"],
        options=given["--option"],
    )
    run_dir = start_run(inv, out_dir, run_id, new=True)
    _say(f"verification [bold]{run_dir.run_id}[/] → {run_dir.root}")
    outcome = audit_pair(inv.pairs[0], run_dir, on_stage=lambda n, stage: _say(f"[dim]{n}: {stage}[/]"))
    if outcome.status == "error":
        err.print(f"[red]{name}: could not be verified:[/] {escape(in_verification_terms(outcome.message, name))}")
    cert = finish_verification(inv, run_dir, strictness=strictness, history=history)
    _say_history(cert.pop("history", None) or {}, run_dir.root, again=False)
    if _Output.json:
        sys.stdout.write(json.dumps(cert, sort_keys=True, default=str) + "\n")
    elif not _Output.quiet:
        summary = json.loads(run_dir.summary.read_text())
        _print_summary(summary, run_dir.root, prose=in_verification_prose, said=in_verification_terms)
        from audit.cli.render import print_certificate

        print_certificate(out, cert, run_dir.root / "certificate.json")
    code = {"passed": 0, "failed": 1}.get(cert["verdict"], outcome.exit_code or 3)
    raise typer.Exit(code)


app.command("daily-report")(daily_report)
app.command("prune")(prune)
app.command("spark-server")(spark_server)


def main() -> None:
    """Entry point: maps the AuditError tree to exit codes; an operator's mistake never shows a traceback."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    with interrupt.armed():
        try:
            code = app(standalone_mode=False)  # returns, rather than raises, the Exit code here
            if interrupt.interrupted():  # typer returned 130 for it
                code = interrupt.exit_code()
            sys.exit(code if isinstance(code, int) else 0)
        except typer.Exit as e:
            sys.exit(e.exit_code)
        except AuditError as e:
            code = exit_code_of_error(e)
            err.print(f"[red]{'error' if code == EXIT_USAGE else 'could not audit'}:[/] {escape(str(e))}")
            sys.exit(code)
        except (typer.Abort, KeyboardInterrupt):  # click turns KeyboardInterrupt into Abort
            sys.exit(interrupt.exit_code())
        except TyperException as e:  # typer's own click: usage errors (a missing or unknown option)
            show = getattr(e, "show", None)
            if callable(show):
                show()
            else:
                err.print(f"[red]error:[/] {escape(str(e))}")
            sys.exit(int(getattr(e, "exit_code", EXIT_USAGE)))
        except Exception as e:
            traceback.print_exc()
            err.print(f"[red]internal error[/] (a bug in replica-audit; please report it): {escape(str(e))}")
            sys.exit(EXIT_INTERNAL)


def console() -> None:
    """The `replica-audit` command: :func:`main`, then the process ends without the interpreter's teardown.

    Once a command is done, Python would still tear down every module and object it loaded (Spark's
    py4j proxies, GX, pandas, matplotlib): 1.35-1.5 s after a `run`, longer than the gate. Nothing in
    that teardown writes results: the output is flushed and the exit handlers (logging, multiprocessing,
    temporary directories) run, then the process exits with the command's code. The Spark JVM stops on
    its own when its parent's pipe closes, as after a normal exit.
    """
    code = 0
    try:
        main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)  # what the interpreter does with a message as the exit code
    _exit_now(code)


def _exit_now(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing left to lose
            pass
    atexit._run_exitfuncs()
    os._exit(code)
