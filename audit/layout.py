"""Where one run's files live (README, "Output of one run"), and the per-pair state between stages.

`findings.parquet` and `metrics.parquet` are Parquet datasets (directories): each pair's stage writes
its own file inside, so mapped Airflow tasks never write the same file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from audit.errors import AuditError, ConfigError, StageInputError

if TYPE_CHECKING:
    from audit.kernel.state import PairState


TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
"""How a run's times are written (manifest.json, and the history after it): UTC ISO 8601 to the second,
so they sort as text."""


def utc_now_text() -> str:
    """Now, as TIME_FORMAT writes it."""
    return time.strftime(TIME_FORMAT, time.gmtime())


_RUN_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}")
RESERVED = frozenset({"gx", "reports", "verifications"})
"""Names under OUT that are never runs, whatever they hold: the GX context, the daily reports, and the
verification runs' own output directory (the post_migration_verification DAG's default `out`)."""


def is_run_id(name: str) -> bool:
    """Whether `name` may name a run (a directory under OUT): what RunDir accepts."""
    return _RUN_ID.fullmatch(name) is not None and name not in RESERVED


RUNS_LOCK = ".runs.lock"
"""A lock file directly under OUT (flock): a stage reopening a run (audit/pipeline.py) and a prune deleting
or trimming one (audit/prune.py, which reads the run again under it) take turns, so a prune never deletes
a run a stage has just started on."""


FINISHING = "finishing"
"""A mark in manifest.json from a report's start until its last file is written (the summary, report.html, the
history entry, a verification's certificate, which reads the snapshots): a prune takes such a run for
unfinished, so it never trims or deletes what is being read or written, a finished run reported again included
(audit/pipeline.py, finishing_run; audit/prune.py)."""


RUNS_LOCK_WAIT_S = 300.0
"""The longest a command waits for OUT's runs lock. Its holders keep it for a manifest's write, or a prune for
one run's deletion (seconds); one holding it past this is stopped or hung (a dead mount), and a command that
waited for it for ever, saying nothing, is what an operator cannot tell from a slow audit."""

GX_LOCK_WAIT_S = 600.0
"""The longest a gate or a prune waits for the Data Docs' lock (`OUT/gx/.lock`). A gate holds it for one pair's
validation and its Data Docs pages (seconds); parallel Airflow tasks queue on it, so its bound is longer."""


@contextlib.contextmanager
def runs_lock(out: Path) -> Iterator[None]:
    try:
        lock = open(Path(out) / RUNS_LOCK, "a+b")  # closed by the `with` below: only the open is an operator matter
    except OSError as e:  # an output directory made read-only: the operator's to fix
        raise ConfigError(f"output {out}: cannot open {RUNS_LOCK}: {e.strerror or e}") from None
    with lock:
        flock_within(lock, Path(out) / RUNS_LOCK, RUNS_LOCK_WAIT_S, "a prune or a stage")
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def flock_within(lock: Any, path: Path, wait_s: float, holders: str, error: type[AuditError] = ConfigError) -> None:
    """flock `lock` (the open file `path`), waiting at most `wait_s`, else `error`: flock itself has no
    timeout, and a holder that is stopped or hung (a dead mount) made every command waiting on it hang too,
    saying nothing. `holders`: who takes the lock, for the error."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise error(
                    f"output {path}: held by another process for {wait_s:.0f} s ({holders}: stopped or hung?); "
                    "nothing was changed"
                ) from None
            time.sleep(0.05)


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(2)


@dataclass(frozen=True)
class RunDir:
    out: Path
    run_id: str

    def __post_init__(self) -> None:
        if self.run_id in RESERVED:
            raise ConfigError(f"run id {self.run_id!r}: names a directory of the output directory's own; give another")
        if not is_run_id(self.run_id):
            raise ConfigError(
                f"run id {self.run_id!r}: expected letters, digits, '_', '-' and '.', not starting with '.' "
                "(it names a directory under the output directory)"
            )
        # absolute and resolved, as GX and the stages resolve what they write: paths recorded relative to
        # the run's root must come out the same whether --out was given relative, absolute or via a symlink
        object.__setattr__(self, "out", Path(self.out).resolve())

    @property
    def root(self) -> Path:
        return self.out / self.run_id

    def snapshot(self, pair: str, side: str) -> Path:
        return self.root / "snapshots" / pair / side

    def work(self, pair: str) -> Path:
        return self.root / "work" / pair

    def findings_file(self, pair: str) -> Path:
        return self.root / "findings.parquet" / f"{pair}.parquet"

    def metrics_file(self, pair: str) -> Path:
        return self.root / "metrics.parquet" / f"{pair}.parquet"

    def gate_dir(self) -> Path:
        return self.root / "gate"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def report(self) -> Path:
        return self.root / "report.html"

    # --- per-pair state shared by the stages -------------------------------------------------------
    def state_file(self, pair: str) -> Path:
        return self.work(pair) / "state.json"

    def load_state(self, pair: str) -> PairState | None:
        """The pair's state in this run, or None before its first stage."""
        from pydantic import ValidationError

        from audit.kernel.state import PairState

        path = self.state_file(pair)
        if not path.exists():
            return None
        try:
            return PairState.model_validate_json(path.read_text())
        except (ValidationError, UnicodeDecodeError) as e:
            raise _damaged(path, str(e).splitlines()[0]) from None

    def load_manifest(self) -> dict[str, Any]:
        """manifest.json, or {} before the run starts."""
        return read_json_object(self.manifest) if self.manifest.exists() else {}

    def save_state(self, state: PairState) -> None:
        write_text(self.state_file(state.pair), state.model_dump_json(indent=1))


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object the pipeline wrote (manifest.json, summary.json). One that is cut short or not JSON
    (a full disk, a hand edit, a copy stopped half way) is named, instead of a JSONDecodeError's traceback."""
    try:
        loaded = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise _damaged(path, str(e)) from None
    if not isinstance(loaded, dict):
        raise _damaged(path, f"a JSON {type(loaded).__name__}, not an object")
    return loaded


def _damaged(path: Path, why: str) -> StageInputError:
    return StageInputError(f"{path}: damaged ({why}); restore it, or start a new run")


def write_text(path: Path, text: str) -> None:
    """Write atomically: a reader never sees half a file, even if the writer is killed."""
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as e:  # an output directory made read-only, or a full disk: the operator's to fix
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise ConfigError(f"output {path.parent}: cannot write {path.name}: {e.strerror or e}") from None


def write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=1, sort_keys=True, default=str))
