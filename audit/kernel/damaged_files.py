"""A run's Parquet files that cannot be read, found when a stage fails, so the failure names the file.

A part file cut short (a full disk, a copy stopped half way, a hand edit) made the stage that read it fail
inside Spark: exit 4 and a JVM's traceback, though nothing is wrong with the auditor. A stage that fails
with an internal error has the pair's files checked (their footers only, about a millisecond each), and a
damaged one turns the failure into :class:`StageInputError` (exit 2) naming it. Checking only after a
failure costs a healthy run nothing, and never refuses a stage that would have rewritten a leftover of its
own interrupted attempt.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from audit.errors import StageInputError


def unreadable(path: Path) -> str | None:
    """Why the Parquet file at `path` cannot be read (missing, or its footer cut short), or None."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pq.read_metadata(path)
    except (pa.ArrowException, OSError) as e:
        return str(e).splitlines()[0] if str(e) else type(e).__name__
    return None


def first_damaged(roots: Iterable[Path]) -> tuple[Path, str] | None:
    """The first Parquet file under `roots` (files or directories) whose footer cannot be read, and why."""
    for path in _parquet_files(roots):
        if (why := unreadable(path)) is not None:
            return path, why
    return None


def _parquet_files(roots: Iterable[Path]) -> Iterator[Path]:
    for root in roots:
        if root.is_file():
            yield root
        elif root.is_dir():
            for path in sorted(root.rglob("*.parquet")):
                # Spark's and Hadoop's hidden files (_temporary, .crc) are a writer's, not a reader's
                hidden = any(part.startswith(("_", ".")) for part in path.relative_to(root).parts)
                if path.is_file() and not hidden:
                    yield path


def as_input_error(stage: str, roots: Iterable[Path]) -> StageInputError | None:
    """The error to raise instead of a stage's internal failure when one of its files is damaged."""
    found = first_damaged(roots)
    if found is None:
        return None
    path, why = found
    return StageInputError(
        f"{stage}: {path} is not a readable Parquet file ({why}); a run's files are not repaired in place: "
        "start a new run"
    )
