"""Retention of run directories under an output directory (README, "Retention"; `replica-audit prune`).

:func:`decide` is the pure rule over what the runs' manifests say; audit/prune.py is the I/O around it
(finding the runs, deleting, marking).
Safety rules: a run is a real directory directly under OUT (never a symlink, never `gx`, `reports` or
`verifications`) whose own `manifest.json` (a regular file) names it; it is finished when its manifest has
`ended_at`, which only the report stage writes (unless a stage started since the report began) and every
stage (and `--resume`) removes as it starts, and no `finishing` (the report's, until its last file is
written): an unfinished run is running, interrupted, or had a stage re-run since its report, and is never
touched, unless `keep_unfinished_days` is set and both the run and its latest stage started longer ago than
that and no stage still runs on it (it is then deleted whole). Ages come from `ended_at`, not from file
times. The newest finished run (and the `keep_last` newest) are always kept. Deletion never follows a
symlink and never leaves OUT. The results history store is not touched: trends survive pruning.
`OUT/verifications` (NESTED), when a real directory, is an output directory of its own and is pruned by the
same policy as OUT, by the same rules (its own newest run, GX context and log of pruned runs).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from audit.errors import ConfigError

NESTED = ("verifications",)
"""Output directories of their own under OUT that a prune of OUT prunes too: the verification runs, which
the post_migration_verification DAG writes to `OUT/verifications` by default. None can name a run
(audit/layout.py, RESERVED)."""
BULKY = ("snapshots", "work")
"""What a trim removes: both sides' snapshots and the work files (diff intermediates, staged findings);
each pair's `work/<pair>/state.json` and the files its state lists as artifacts stay."""
GX_RESULTS = ("gx/uncommitted/validations", "gx/data_docs/validations")
"""Where a run's GX results and Data Docs pages live: `<suite>/<run_id>@<pair>/` under each."""
PRUNED_LOG = "pruned-runs.jsonl"
"""One JSON line per run deleted whole, so the daily report can say a run was pruned."""


@dataclass(frozen=True)
class Policy:
    keep_days: float | None = None
    keep_snapshot_days: float | None = None
    keep_last: int = 1
    keep_unfinished_days: float | None = None
    """An unfinished run (killed, never resumed) that *started* more than this many days ago is deleted
    whole; None (the default): unfinished runs are never touched."""

    def __post_init__(self) -> None:
        for name in ("keep_days", "keep_snapshot_days", "keep_last", "keep_unfinished_days"):
            value = getattr(self, name)
            try:
                usable = value is None or (value >= 0 and timedelta(days=value) >= timedelta(0))
            except (OverflowError, ValueError):  # inf, nan, or more days than a date holds
                usable = False
            if not usable:
                raise ConfigError(f"--{name.replace('_', '-')} {value}: expected a number of 0 or more")
        if self.keep_last < 1:  # 0 kept the newest run all the same, and said nothing of it
            raise ConfigError(
                f"--keep-last {self.keep_last}: expected 1 or more (the newest finished run is always kept)"
            )
        if self.keep_days is None and self.keep_snapshot_days is None and self.keep_unfinished_days is None:
            raise ConfigError(
                "prune: give --keep-days, --keep-snapshot-days or --keep-unfinished-days (nothing to prune by)"
            )


@dataclass(frozen=True)
class Run:
    run_id: str
    ended_at: datetime | None
    """None: not finished (no `ended_at` in its manifest)."""
    trimmed: bool = False
    started_at: datetime | None = None
    """From its manifest, when the run or its latest stage started (`started_at`, `stage_started_at`): the
    age of an unfinished run (None: unknown, and such a run is kept)."""
    running: tuple[str, ...] = ()
    """The stages its manifest marks that still run (audit/stage_marks.py): such a run is kept, whatever its age."""


@dataclass(frozen=True)
class Decision:
    delete: tuple[str, ...]
    trim: tuple[str, ...]
    keep: dict[str, str]
    """run id -> why it is kept whole."""


def decide(runs: Iterable[Run], policy: Policy, now: datetime) -> Decision:
    """Which runs to delete whole, which to trim to their results, and why each other one is kept."""
    runs = list(runs)
    finished = sorted((r for r in runs if r.ended_at is not None), key=lambda r: (r.ended_at, r.run_id), reverse=True)
    protected = {r.run_id for r in finished[: policy.keep_last]}
    delete, trim, keep = [], [], {}
    for r in sorted(runs, key=lambda r: r.run_id):
        if r.running:  # a stage working for longer than --keep-unfinished-days is not a killed run
            keep[r.run_id] = f"not finished, still running: {', '.join(r.running)}"
        elif r.ended_at is None:
            if _older(r.started_at, policy.keep_unfinished_days, now):
                delete.append(r.run_id)
            else:
                keep[r.run_id] = "not finished (running, or a --resume can continue it)"
        elif r.run_id in protected:
            keep[r.run_id] = "the newest finished run" if r.run_id == finished[0].run_id else "among --keep-last"
        elif policy.keep_days is not None and now - r.ended_at > timedelta(days=policy.keep_days):
            delete.append(r.run_id)
        elif policy.keep_snapshot_days is not None and now - r.ended_at > timedelta(days=policy.keep_snapshot_days):
            if r.trimmed:
                keep[r.run_id] = "snapshots and work files already pruned"
            else:
                trim.append(r.run_id)
        else:
            keep[r.run_id] = "younger than the policy's ages"
    return Decision(tuple(delete), tuple(trim), keep)


def _older(at: datetime | None, days: float | None, now: datetime) -> bool:
    return at is not None and days is not None and now - at > timedelta(days=days)


def pruned_runs(out: Path) -> dict[str, str]:
    """run id -> when it was deleted whole by a prune (from OUT's log of pruned runs)."""
    found = {}
    try:
        lines = (Path(out) / PRUNED_LOG).read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    for line in lines:
        try:
            entry = json.loads(line)
            found[str(entry["run_id"])] = str(entry["pruned_at"])
        except (ValueError, KeyError, TypeError):
            continue
    return found
