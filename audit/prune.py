"""Pruning run directories: find the provable runs under OUT, delete what audit/retention.py decides.

    for plan in plan_prunes(Path("/data/audit"), Policy(keep_days=30, keep_snapshot_days=3, keep_last=24)):
        result = apply_prune(plan)         # or only show the plans: a dry run

One plan per output directory: OUT, then each of its own under it (`OUT/verifications`, retention.NESTED).

Nothing here follows a symlink or leaves OUT (the rules: audit/retention.py, README "Retention").
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from audit import layout, stage_marks
from audit.errors import ConfigError
from audit.layout import FINISHING, TIME_FORMAT, flock_within, is_run_id, runs_lock, utc_now_text, write_json
from audit.retention import BULKY, GX_RESULTS, NESTED, PRUNED_LOG, Decision, Policy, Run, decide


def _real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def _manifest(root: Path) -> dict[str, Any] | None:
    path = root / "manifest.json"
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            return None
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("run_id") == root.name else None


def _time(manifest: dict[str, Any], name: str) -> datetime | None:
    try:
        return datetime.strptime(str(manifest[name]), TIME_FORMAT).replace(tzinfo=UTC)
    except (KeyError, ValueError):
        return None  # not recorded (or not readable): no end is "not finished", no start is "age unknown"


def scan_runs(out: Path) -> list[Run]:
    """The provable run directories directly under `out` (see the module's rules)."""
    found = (_run_of(entry) for entry in (sorted(out.iterdir()) if _real_dir(out) else []))
    return [run for run in found if run is not None]


def _run_of(entry: Path) -> Run | None:
    """The run at `entry` as its manifest says it is now; None when `entry` is not a provable run."""
    if not is_run_id(entry.name) or not _real_dir(entry):  # gx, reports, verifications: not run ids
        return None
    manifest = _manifest(entry)
    if manifest is None:
        return None
    # an unfinished run's age: from its start, or from the latest stage started on it (a resume, a re-run)
    starts = [t for t in (_time(manifest, "started_at"), _time(manifest, "stage_started_at")) if t is not None]
    ended = None if manifest.get(FINISHING) else _time(manifest, "ended_at")  # a report still writing: unfinished
    running = tuple(stage_marks.running(manifest))
    return Run(entry.name, ended, bool(manifest.get("pruned")), max(starts, default=None), running)


def size_of(path: Path) -> int:
    """Bytes of `path` and what is under it (as `du` counts: directories too), symlinks as links, never followed."""
    try:
        total = path.lstat().st_size
        if not stat.S_ISDIR(path.lstat().st_mode):
            return total
    except OSError:
        return 0
    for root, dirs, files in os.walk(path):  # os.walk does not descend into symlinked directories
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


@dataclass(frozen=True)
class Plan:
    out: Path
    decision: Decision
    paths: dict[str, tuple[Path, ...]]
    """run id -> the paths its deletion or trim removes."""
    runs: dict[str, Run] = field(default_factory=dict)
    """run id -> the run as planned: one that changed before its turn (a stage started on it) is left."""
    under: str = ""
    """The name of this output directory under the OUT given (`verifications`); "" for OUT itself."""
    notes: tuple[str, ...] = ()
    """What was not looked at, and why (an output directory of its own that is a symlink)."""

    def name(self, run_id: str) -> str:
        """The run as the OUT given sees it: `verifications/<run_id>` for a verification run."""
        return f"{self.under}/{run_id}" if self.under else run_id


def _gx_paths(out: Path, run_id: str) -> list[Path]:
    found = []
    for rel in GX_RESULTS:
        root, parts = out, []
        for part in Path(rel).parts:
            root = root / part
            parts.append(root)
        if not all(_real_dir(p) for p in parts):
            continue  # missing, or a symlinked part of OUT/gx that leads out of OUT: not followed
        for suite in sorted(p for p in root.iterdir() if _real_dir(p)):
            found += sorted(p for p in suite.iterdir() if p.name.startswith(f"{run_id}@") and not p.is_symlink())
    return found


def _trim_paths(root: Path) -> list[Path]:
    """The bulky parts of a run: its snapshots, and its work files but each pair's state and artifacts."""
    found = [root / "snapshots"] if _real_dir(root / "snapshots") else []
    work = root / "work"
    for pair in sorted(p for p in work.iterdir() if _real_dir(p)) if _real_dir(work) else []:
        try:
            artifacts = json.loads((pair / "state.json").read_text()).get("artifacts") or {}
        except (OSError, ValueError, AttributeError):
            artifacts = {}
        kept = {(root / str(a)).absolute() for a in artifacts.values()}
        found += _except(pair, kept | {pair / "state.json"})
    return found


def _except(directory: Path, kept: set[Path]) -> list[Path]:
    found = []
    for child in sorted(directory.iterdir()):
        if child in kept:
            continue
        if _real_dir(child) and any(child in k.parents for k in kept):
            found += _except(child, kept)
        else:
            found.append(child)
    return found


def plan_prunes(out: Path, policy: Policy, now: datetime | None = None) -> list[Plan]:
    """OUT's plan, then one for each output directory of its own under OUT (NESTED) that is a real directory:
    its runs are judged among themselves (their own newest is kept). A symlinked one is not followed."""
    now = now or datetime.now(UTC)
    top = plan_prune(out, policy, now)
    plans, notes = [top], []
    for name in NESTED:
        nested = top.out / name
        if _real_dir(nested):
            plans.append(plan_prune(nested, policy, now, under=name))
        elif nested.is_symlink():
            notes.append(f"{name}: a symbolic link, not followed (prune -o the directory it names)")
    plans[0] = replace(top, notes=tuple(notes))
    return plans


def plan_prune(out: Path, policy: Policy, now: datetime | None = None, under: str = "") -> Plan:
    """The plan for the runs directly under `out` alone."""
    out = Path(out).resolve()
    if not _real_dir(out):
        raise ConfigError(f"prune: --out {out}: no such directory")
    runs = {r.run_id: r for r in scan_runs(out)}
    decision = decide(runs.values(), policy, now or datetime.now(UTC))
    paths = {r: (*_gx_paths(out, r), out / r) for r in decision.delete}  # the run last: retried if GX fails
    paths.update({r: tuple(_trim_paths(out / r)) for r in decision.trim})
    return Plan(out, decision, paths, {r: runs[r] for r in paths}, under)


@dataclass
class Result:
    freed: dict[str, int] = field(default_factory=dict)
    """run id -> bytes freed."""
    failed: list[tuple[Path, str]] = field(default_factory=list)
    left: dict[str, str] = field(default_factory=dict)
    """run id -> why a run of the plan was left as it is after all."""
    index_dropped: int = 0
    """Rows of deleted results dropped from the Data Docs index."""
    index_left: str = ""
    """Why the Data Docs index was left listing deleted results ("" when it was not)."""


DONE, KEPT, NOTE = "done", "kept", "note"
"""The kinds of sentence :func:`describe` says: what went (or would go), a run left as it is and why, and what
was not pruned or rewritten (the CLI prints the first on stdout, the others on stderr; Airflow logs a NOTE
as a warning)."""


def preview(plan: Plan) -> Result:
    """What applying `plan` would free (a dry run): each run's bytes, nothing deleted."""
    return Result({r: sum(size_of(p) for p in paths) for r, paths in plan.paths.items()})


def describe(plan: Plan, result: Result, dry_run: bool = False) -> list[tuple[str, str]]:
    """What one plan's prune did (with `dry_run`, what it would do), one sentence each: (DONE, KEPT or NOTE,
    sentence). `replica-audit prune` prints them and PruneOperator logs them, so both say the same."""
    from audit.report.charts import format_bytes  # matplotlib loads only when a chart is drawn

    verb, said = "would delete" if dry_run else "deleted", []
    for run_id in (r for r in plan.decision.delete if r in result.freed):
        said.append((DONE, f"{verb} run {plan.name(run_id)} ({format_bytes(result.freed[run_id])})"))
    for run_id in (r for r in plan.decision.trim if r in result.freed):
        size = format_bytes(result.freed[run_id])
        said.append((DONE, f"{verb} snapshots and work files of run {plan.name(run_id)} ({size})"))
    said += [(KEPT, f"kept {plan.name(r)}: {why}") for r, why in {**plan.decision.keep, **result.left}.items()]
    said += [(NOTE, f"not pruned: {note}") for note in plan.notes]
    index = docs_index(plan.out)
    if result.index_dropped:
        rows = f"{result.index_dropped} row{'s' if result.index_dropped > 1 else ''}"
        said.append((DONE, f"dropped {rows} of deleted results from the Data Docs index {index}"))
    if result.index_left:
        said.append((NOTE, f"Data Docs index {index}: {result.index_left}; the next gate rebuilds it"))
    return said


def describe_total(freed: int, out: Path, dry_run: bool = False) -> str:
    """The last sentence of a prune of `out` (every plan): the bytes it freed (or would free)."""
    from audit.report.charts import format_bytes

    return f"{'would free' if dry_run else 'freed'} {format_bytes(freed)} ({freed} bytes) in {out}"


CHANGED = "changed since the plan (a stage started on it, so it is unfinished again): left for the next prune"


def apply_prune(plan: Plan) -> Result:
    """Delete what the plan says; a path that cannot be deleted is recorded and the others still go. The GX
    context's lock is held meanwhile, so a gate running at the same time never sees half a result deleted.
    Each run is read again under OUT's runs lock before it is touched, and left if it changed since the plan:
    a stage that started on it meanwhile reopened it (audit/pipeline.py, reopen_run, which takes that lock)."""
    result = Result()
    with _gx_lock(plan.out):
        for run_id, paths in plan.paths.items():
            try:
                with runs_lock(plan.out):
                    if _run_of(plan.out / run_id) != plan.runs.get(run_id):
                        result.left[run_id] = CHANGED
                        continue
                    _apply(plan, run_id, paths, result)
            except ConfigError as e:  # the lock could not be opened, or the mark written (a read-only OUT)
                result.failed.append((plan.out / run_id, str(e)))
        if any(r in result.freed for r in plan.decision.delete):
            _trim_index(plan.out, result)
    return result


def docs_index(out: Path) -> Path:
    """The Data Docs index of the GX context under `out` (audit/gate/gx.py builds it), as prune reaches it."""
    from audit.gate.docs_index import INDEX

    return out / "gx" / "data_docs" / INDEX


def _trim_index(out: Path, result: Result) -> None:
    """Drop the deleted results' rows from the Data Docs index (under the GX lock, which the caller holds),
    so it links no page that is gone; the next gate rebuilds it in full (audit/gate/docs_index.py)."""
    from audit.gate.docs_index import drop_dead_rows

    index = docs_index(out)
    site = index.parent
    try:
        if not (_real_dir(out / "gx") and _real_dir(site) and stat.S_ISREG(index.lstat().st_mode)):
            return  # no index, or one reached through a symlink: not this prune's to rewrite
    except OSError:
        return
    try:
        dropped = drop_dead_rows(site)
    except (OSError, ConfigError) as e:  # unreadable, or not writable
        result.index_left = f"not rewritten ({e})"
        return
    if dropped is None:
        result.index_left = "not in the form prune knows, so left as it is"
    else:
        result.index_dropped = dropped


@contextmanager
def _gx_lock(out: Path) -> Iterator[None]:
    if not _real_dir(out / "gx"):
        yield
        return
    with open(out / "gx" / ".lock", "a+b") as lock:  # the lock audit/gate/gx.py takes
        flock_within(lock, out / "gx" / ".lock", layout.GX_LOCK_WAIT_S, "a gate or a prune")
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _apply(plan: Plan, run_id: str, paths: tuple[Path, ...], result: Result) -> None:
    failed_before = len(result.failed)
    before = sum(size_of(p) for p in paths)
    for p in paths:
        if plan.out not in p.parents:  # never anything outside OUT, nor OUT itself
            result.failed.append((p, "outside the output directory"))
        else:
            _remove(p, result.failed)
    result.freed[run_id] = before - sum(size_of(p) for p in paths)
    if len(result.failed) == failed_before:
        _mark(plan.out, run_id, whole=run_id in plan.decision.delete)


def _remove(path: Path, failed: list[tuple[Path, str]]) -> None:
    """Delete without following symlinks. A run's manifest goes last: a run half deleted is still a run,
    which the next prune finishes, not an anonymous directory no prune would touch."""
    try:
        if not _real_dir(path):
            path.unlink(missing_ok=True)
            return
        errors, last = len(failed), path / "manifest.json"
        for child in sorted(c for c in path.iterdir() if c != last):
            if _real_dir(child):
                shutil.rmtree(child, onerror=lambda _f, p, e: failed.append((Path(p), str(e[1]))))
            else:
                _remove(child, failed)  # a file or a link: its own failure is recorded, the others still go
        if len(failed) == errors:
            last.unlink(missing_ok=True)
            path.rmdir()
    except OSError as e:
        failed.append((Path(e.filename or path), e.strerror or str(e)))


def _mark(out: Path, run_id: str, whole: bool) -> None:
    """A run trimmed says so in its manifest; a run deleted whole, in OUT's log of pruned runs."""
    at = utc_now_text()
    if whole:
        with open(out / PRUNED_LOG, "a", encoding="utf-8") as log:
            log.write(json.dumps({"run_id": run_id, "pruned_at": at}) + "\n")
        return
    manifest = _manifest(out / run_id) or {}
    manifest["pruned"] = {"at": at, "removed": list(BULKY)}
    write_json(out / run_id / "manifest.json", manifest)
