"""The audit as stages over a run directory; the pipeline owns each stage's life.

For one pair and one stage, the pipeline loads the pair's state (a fresh one for `snapshot`, else it
requires the previous stage), calls each of the kind's checks for that stage with a StageContext,
stamps the stage, consolidates the staged findings after `recheck`, and saves the state. A check does
only its own work (audit/kernel/check.py). The stages can run in one process (`replica-audit run`) or as
separate tasks on different workers (Airflow), given a shared output directory.

A failure ends its pair only: it is recorded in the pair's state (stage, message, exit code, and for a
bug the traceback) and the other pairs are audited; the run's exit status says what went wrong
(audit/outcome.py).
"""

from __future__ import annotations

import logging
import shutil
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from audit import stage_marks
from audit.connections import env_conn_resolver
from audit.errors import AuditError, ConfigError, SourceError, StageInputError
from audit.inventory import Inventory, Pair
from audit.kernel.context import Progress, StageContext
from audit.kernel.damaged_files import as_input_error
from audit.kernel.kind import KindSpec, kind_spec
from audit.kernel.staging import FindingsStaging
from audit.kernel.state import CheckState, ErrorInfo, GateVerdict, PairState, StageStamp
from audit.layout import FINISHING, RunDir, new_run_id, runs_lock, utc_now_text, write_json
from audit.outcome import EXIT_GATE_FAILED, EXIT_OK, exit_code_of_error
from audit.urls import ConnResolver

STAGES = ("snapshot", "diff", "recheck", "gate")
log = logging.getLogger("replica_audit")


def tool_version() -> str:
    try:
        return version("replica-audit")
    except PackageNotFoundError:
        return "0+unknown"


def start_run(
    inventory: Inventory, out: Path, run_id: str | None = None, reopen: bool = False, new: bool = False
) -> RunDir:
    """The run's directory and manifest. `reopen` (a --resume) marks a finished run unfinished again until its
    report (:func:`reopen_run`); a run a prune trimmed cannot be resumed. `new` (a `run` or `verify`) refuses
    a run that exists: checked and created under OUT's runs lock, since two commands given one --run-id at
    once both found it absent, then audited into one directory (one exit 4, the other a pass over both). With
    no `run_id`, one is drawn (:func:`audit.layout.new_run_id`) until it names no run."""
    while True:
        run = RunDir(Path(out), run_id or new_run_id())
        try:
            run.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"output directory {out}: cannot create {run.root}: {e.strerror}") from None
        with runs_lock(run.out):
            created = not run.manifest.exists()
            if created:
                write_json(run.manifest, _first_manifest(inventory, run))
            elif run_id is None:
                continue  # an id drawn here that another command drew in the same second: never share its run
            elif new:
                raise ConfigError(f"--run-id {run.run_id}: a run of that id is already in {out} (started meanwhile)")
        if not created and reopen:
            reopen_run(run)
        return run


def _first_manifest(inventory: Inventory, run: RunDir) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "started_at": utc_now_text(),
        "inventory_digest": inventory.digest,
        "tool_version": tool_version(),
        "pairs": {
            p.name: {"kind": p.kind, "master": p.display_endpoint("master"), "replica": p.display_endpoint("replica")}
            for p in inventory.pairs
        },
    }


def reopen_run(run: RunDir, stage: str | None = None, pair: str | None = None) -> None:
    """Mark the run unfinished from now until its next report, so a prune keeps it meanwhile, and after a
    crash (audit/retention.py): a --resume (`stage` None) or a stage starting on it, by hand or an Airflow
    task cleared after the report. `stage_started_at` restarts the age --keep-unfinished-days reads. Done
    under OUT's runs lock: a prune that planned to delete the run reads it again under that lock first.

    A run a prune trimmed cannot be resumed, nor a stage but `gate` re-run on it: the others read or
    rewrite the snapshots and work files the trim removed. A `stage` of a `pair` also marks itself running
    (audit/stage_marks.py) until :func:`_unmark_stage`; it is refused while a stage of that pair still
    runs, as a --resume is while any stage of the run does (:func:`_refuse_overlap`)."""
    with runs_lock(run.out):
        manifest = run.load_manifest()  # a damaged one is exit 2 naming it
        if not manifest:
            return  # no manifest: a prune never touches the run
        _refuse_overlap(run, manifest, stage, pair)
        if (pruned := manifest.get("pruned")) and stage != "gate":
            what = f"--resume {run.run_id}" if stage is None else f"{stage} of run {run.run_id}"
            at = pruned.get("at") if isinstance(pruned, dict) else pruned
            raise ConfigError(f"{what}: its snapshots and work files were pruned ({at}); start a new run")
        manifest.pop("ended_at", None)
        manifest.pop(FINISHING, None)
        manifest["stage_started_at"] = utc_now_text()
        counted = manifest.get("stages_started")  # to the second, stage_started_at may not tell two starts apart
        manifest["stages_started"] = (counted if isinstance(counted, int) else 0) + 1
        if stage is not None and pair is not None:
            stage_marks.mark(manifest, pair, stage)
        write_json(run.manifest, manifest)


def _refuse_overlap(run: RunDir, manifest: dict[str, Any], stage: str | None, pair: str | None) -> None:
    """Two stages of one pair at once share its snapshots, work files and state: a snapshot run again deleted
    the snapshots a slow diff was reading and read the servers anew beneath it, a resume ran a second diff
    over the first. The one started last is refused (exit 2); the running one goes on."""
    still = stage_marks.running(manifest, of_pair=pair)
    if not still:
        return
    what = f"--resume {run.run_id}" if stage is None else f"{stage} of pair {pair} in run {run.run_id}"
    raise ConfigError(f"{what}: not started, still running: {', '.join(still)}; wait for it to end")


def _unmark_stage(run: RunDir, stage: str, pair: str) -> None:
    """The end of `stage` of `pair`, however it ended: its running mark removed (:func:`reopen_run`)."""
    with runs_lock(run.out):
        manifest = run.load_manifest()
        if stage_marks.unmark(manifest, pair, stage):
            write_json(run.manifest, manifest)


def _opening(manifest: dict[str, Any]) -> tuple[Any, Any]:
    """The latest stage start the manifest records (:func:`reopen_run`)."""
    return manifest.get("stage_started_at"), manifest.get("stages_started")


def _write_end(run: RunDir, opened: tuple[Any, Any], changes: dict[str, Any], drop: tuple[str, ...] = ()) -> str | None:
    """Write the report's `changes` (the run's end, what it found) into the manifest as it is now, under OUT's
    runs lock, unless a stage started on the run since the report read it (`opened`) or one is still running
    (audit/stage_marks.py): the run must stay unfinished (so no prune deletes it under the stage) until a
    report after that stage. None when written, else why not."""
    with runs_lock(run.out):
        manifest = run.load_manifest()
        if _opening(manifest) != opened:
            return "a stage started on it while its report was written"
        if still := stage_marks.running(manifest):
            return f"still running: {', '.join(still)}"
        manifest.update(changes)
        for name in drop:
            manifest.pop(name, None)
        write_json(run.manifest, manifest)
        return None


# --- one stage of one pair ------------------------------------------------------------------------------
def _state_for(stage: str, pair: Pair, run: RunDir) -> PairState:
    if stage == "snapshot":
        return PairState(pair=pair.name, kind=pair.kind)  # a snapshot (re)starts the pair's audit
    previous = STAGES[STAGES.index(stage) - 1]
    state = run.load_state(pair.name)
    if state is None or previous not in state.stages:
        raise StageInputError(f"pair {pair.name}: no `{previous}` results in {run.root}; run that stage first")
    if state.error is not None and state.error.stage == stage:
        state.error = None  # an earlier attempt of this stage failed; this one starts clean
    return state


def _run_checks(
    stage: str,
    spec: KindSpec,
    pair: Pair,
    run: RunDir,
    state: PairState,
    resolver: ConnResolver | None,
    progress: Progress | None,
) -> None:
    staging = FindingsStaging(run.work(pair.name) / "findings")
    staging.clear(stage)
    deferred: list[Exception] = []  # StageContext.fail_after: raised once the stage's work is done
    for position, check in enumerate(spec.checks(pair)):
        if state.skipped(check.name):
            continue
        ctx = StageContext(
            stage, check.name, position, pair, run, state, staging, resolver or env_conn_resolver, progress, deferred
        )
        getattr(check, stage)(ctx)
        if stage == "snapshot" and check.name not in state.checks:
            state.checks[check.name] = CheckState(status="done")
    if stage == "recheck":
        state.counts = staging.consolidate(run.findings_file(pair.name), run.run_id, pair.name, pair.kind)
    if deferred:
        raise deferred[0]


def run_stage(
    stage: str, pair: Pair, run: RunDir, resolver: ConnResolver | None = None, progress: Progress | None = None
) -> GateVerdict | None:
    """Run one stage for one pair. A failure is recorded in the pair's state, then re-raised."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage}")
    spec = kind_spec(pair.kind)
    state = _state_for(stage, pair, run)
    with _running(run, stage, pair.name):
        again = stage == "snapshot" and _snapshot_finished(run, pair.name)
        _open_stage(run, state, stage)
        if again:
            _drop_snapshots(run, pair.name)
        started = time.time()
        verdict = None
        try:
            if stage == "gate":
                from audit.gate.verdict import gate_pair

                verdict = gate_pair(run, pair, spec, state)
            else:
                _run_checks(stage, spec, pair, run, state, resolver, progress)
        except Exception as e:
            damaged = None if isinstance(e, AuditError) else as_input_error(stage, _files_of(run, pair.name))
            _record_error(run, state, stage, damaged or e)
            if damaged is not None:
                raise damaged from None
            raise
        state.stages[stage] = StageStamp(at_ms=int(time.time() * 1000), took_s=round(time.time() - started, 3))
        run.save_state(state)
        return verdict


@contextmanager
def _running(run: RunDir, stage: str, pair: str) -> Iterator[None]:
    """The run unfinished from here until its report, whatever the stage does, and the stage marked
    running until it ends (:func:`reopen_run`, :func:`_unmark_stage`)."""
    reopen_run(run, stage, pair)
    try:
        yield
    finally:
        _unmark_stage(run, stage, pair)


def _open_stage(run: RunDir, state: PairState, stage: str) -> None:
    """Forget what this stage and the later ones concluded in an earlier attempt (an Airflow task cleared
    and run again, a retry) and save that before any work. A stage killed midway never reaches the
    `except` of :func:`run_stage` (a lost worker, SIGKILL, Airflow's execution_timeout and task kill,
    which raise BaseExceptions): the pair must then read as unfinished, not with the earlier attempt's
    gate verdict, which the verdict and report tasks published as this run's pass."""
    for done in STAGES[STAGES.index(stage) :]:
        state.stages.pop(done, None)
    state.gate = None
    if stage != "gate":
        state.counts = {}  # consolidated again by the recheck
    run.save_state(state)
    # and what they wrote: the report and the run's datasets would list the earlier attempt's findings and
    # metrics beside a pair that now reads unfinished
    stale = [run.metrics_file(state.pair)] + ([run.findings_file(state.pair)] if stage != "gate" else [])
    for path in stale:
        path.unlink(missing_ok=True)


def _snapshot_finished(run: RunDir, pair: str) -> bool:
    """Whether the pair's snapshot stage finished in this run before: a snapshot started now is then a run
    again (an Airflow task or DAG run cleared, `snapshot --run-id R` repeated), not a continuation. A state
    that cannot be read says nothing: the snapshot goes on as before."""
    try:
        earlier = run.load_state(pair)
    except AuditError:
        return False
    return earlier is not None and "snapshot" in earlier.stages


def _drop_snapshots(run: RunDir, pair: str) -> None:
    """Delete the pair's earlier snapshots, so a snapshot run again reads the servers again. A kind keeps a
    side whose snapshot is complete (what continues an interrupted snapshot, a --resume or a retry, from
    its checkpoints), which made a cleared DAG run certify the data the first attempt read, hours before,
    and pass on a divergence planted since."""
    where = run.root / "snapshots" / pair
    try:
        shutil.rmtree(where)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise ConfigError(f"pair {pair}: cannot delete the earlier snapshots {where}: {e.strerror or e}") from None


def _files_of(run: RunDir, pair: str) -> list[Path]:
    """What the stages of one pair read: its snapshots, its work files and its findings."""
    return [run.root / "snapshots" / pair, run.work(pair), run.findings_file(pair), run.metrics_file(pair)]


def _record_error(run: RunDir, state: PairState, stage: str, error: BaseException) -> None:
    code = exit_code_of_error(error)
    internal = not isinstance(error, AuditError)
    state.error = ErrorInfo(
        stage=stage,
        message=str(error) if not internal else f"{type(error).__name__}: {error}",
        type=type(error).__name__,
        where=getattr(error, "where", "") or "",
        exit_code=code,
        internal=internal,
        traceback="".join(traceback.format_exception(error)) if internal else None,
    )
    run.save_state(state)


# --- all stages of one pair -------------------------------------------------------------------------------
@dataclass(frozen=True)
class PairOutcome:
    pair: str
    status: str  # passed | failed | error
    message: str = ""
    exit_code: int = EXIT_OK


def audit_pair(
    pair: Pair,
    run: RunDir,
    resolver: ConnResolver | None = None,
    progress: Progress | None = None,
    on_stage: Callable[[str, str], None] | None = None,
    resume: bool = False,
) -> PairOutcome:
    """All stages for one pair (with `resume`, from the first stage not yet done in this run).

    Whatever goes wrong ends this pair only and becomes its outcome: a source or configuration error,
    or a bug (logged with its traceback, which is also kept in the pair's state).
    """
    earlier = run.load_state(pair.name) if resume else None
    done = set(earlier.stages) if earlier is not None else set()  # a failed stage is not stamped: it runs again
    verdict = None
    try:
        for stage in STAGES:
            if stage in done and stage != "gate":
                continue
            if on_stage is not None:
                on_stage(pair.name, stage)
            verdict = run_stage(stage, pair, run, resolver, progress)
    except Exception as e:
        code = exit_code_of_error(e)
        if code == 4:
            log.error("pair %s: internal error\n%s", pair.name, "".join(traceback.format_exception(e)))
        kind = "could not be audited" if isinstance(e, SourceError) else str(type(e).__name__)
        return PairOutcome(pair.name, "error", str(e) or kind, code)
    assert verdict is not None
    return PairOutcome(
        pair.name, "passed" if verdict.success else "failed", "", EXIT_OK if verdict.success else EXIT_GATE_FAILED
    )


# --- the end of a run ------------------------------------------------------------------------------------
def finish_run(inventory: Inventory, run: RunDir, pairs: list[Pair], history: str | None = None) -> dict[str, Any]:
    """summary.json, report.html, the manifest's end, and the run appended to the results history
    (:func:`finishing_run`, with nothing more to write)."""
    with finishing_run(inventory, run, pairs, history) as summary:
        return summary


@contextmanager
def finishing_run(
    inventory: Inventory, run: RunDir, pairs: list[Pair], history: str | None = None
) -> Iterator[dict[str, Any]]:
    """summary.json, report.html, the manifest's end, and the run appended to the results history; then what
    the `with` block writes (a verification's certificate). Gives the summary and the history's outcome.

    From the report's start until the block is done, the manifest says FINISHING, so a prune (which
    takes the run for unfinished meanwhile) never trims or deletes what is still being read or written; a
    block that raises leaves the run so, like a report that crashed. The manifest is written under OUT's
    runs lock, and not at all if a stage started on the run since it was read here (:func:`_write_end`):
    that stage's own report ends the run.

    `history` is the store's URL; None means $REPLICA_AUDIT_HISTORY, else `<out>/history.sqlite`. A
    history store that cannot be written is recorded in the manifest; it never changes the verdict.
    """
    from audit.report.html import render_report
    from audit.report.summary import build_summary

    manifest = _start_finishing(run)
    opened = _opening(manifest)
    summary = build_summary(run, pairs, run_pairs=list(manifest.get("pairs") or ()))
    write_json(run.summary, summary)
    servers = {p["pair"]: p.get("servers", {}) for p in summary["pairs"]}
    end = {"ended_at": utc_now_text(), FINISHING: True, "servers": servers, "exit_code": summary["exit_code"]}
    not_ended = _write_end(run, opened, end)
    render_report(run, summary, history=history)  # after the manifest's end, which the report shows
    recorded = record_history(run, history)
    yield {**summary, "history": recorded}  # the caller says when the store could not be written
    if not_ended is None:
        not_ended = _write_end(run, opened, {"history": recorded}, drop=(FINISHING,))
    if not_ended is not None:
        log.warning("run %s: %s: it stays unfinished until its next report", run.run_id, not_ended)


def _start_finishing(run: RunDir) -> dict[str, Any]:
    """The manifest marked FINISHING before the report reads anything, under OUT's runs lock: a finished run
    reported again (to append it to the history, say) was deleted by a prune under its report, which then
    wrote its summary and report.html into a directory with no manifest. A run already gone is exit 2."""
    with runs_lock(run.out):
        manifest = run.load_manifest()
        if not manifest:
            raise StageInputError(f"run {run.run_id}: no manifest.json in {run.root} (pruned?); start a new run")
        manifest[FINISHING] = True
        write_json(run.manifest, manifest)
    return manifest


def record_history(run: RunDir, url: str | None) -> dict[str, Any]:
    from audit.history import history_url, open_history
    from audit.history.store import shown_url

    url = history_url(url)
    try:
        with open_history(url, out=run.out) as store:
            rows = store.append_run(run.root)
            return {"status": "appended", "store": store.where, "rows": rows}
    except AuditError as e:
        return {"status": "error", "store": shown_url(url) if url else "default", "message": str(e)}
