"""A RocketMQ store's commit-log files: listing, scanning a file from disk, and the store's offsets.

Files are named by their absolute start offset (20 zero-padded digits), 1 GiB each by default,
preallocated and zero-filled; see audit/sources/rocketmq/format.py for the record layout.
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa

from audit.sources.rocketmq.scan import DEFAULT_BATCH_BYTES, data_end, iter_batches

_FILE_NAME = re.compile(r"^\d{20}$")


class CommitLogFile(NamedTuple):
    start: int
    path: Path


def commitlog_files(store_dir: str | Path) -> list[CommitLogFile]:
    """The commit-log files of a store, by start offset.

    `store_dir` is a store root (holding ``commitlog/``), a commit-log directory itself, or several of
    either joined with ``;`` as in the broker's storePathCommitLog (MultiPathMappedFileQueue).
    """
    found: dict[int, Path] = {}
    for part in str(store_dir).split(";"):
        if not part.strip():
            continue
        root = Path(part.strip())
        folder = root / "commitlog" if (root / "commitlog").is_dir() else root
        if not folder.is_dir():
            continue
        for p in folder.iterdir():
            if _FILE_NAME.match(p.name) and p.is_file():
                found.setdefault(int(p.name), p)
    return [CommitLogFile(start, found[start]) for start in sorted(found)]


def parse_file(
    path: str | Path, *, file_start: int | None = None, last_file: bool = True, batch_bytes: int = DEFAULT_BATCH_BYTES
) -> Iterator[pa.RecordBatch]:
    """Scan one file from disk in batches (mmap: a 1 GiB file costs page cache, not process memory)."""
    p = Path(path)
    start = int(p.name) if file_start is None else file_start
    with p.open("rb") as fh:
        if p.stat().st_size == 0:
            return
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        mm.madvise(mmap.MADV_SEQUENTIAL)
        yield from iter_batches(mm, file_start=start, last_file=last_file, batch_bytes=batch_bytes)
    finally:
        try:
            mm.close()
        except BufferError:  # an exported view is still alive somewhere; the mapping goes with it
            pass


def file_data_end(path: str | Path, *, file_start: int | None = None, last_file: bool = True) -> int:
    p = Path(path)
    start = int(p.name) if file_start is None else file_start
    return data_end(list(parse_file(p, file_start=start, last_file=last_file)), start)


def max_offset(store_dir: str | Path) -> int | None:
    """The store's max physical offset (MappedFileQueue.getMaxOffset) from its files; None without files."""
    files = commitlog_files(store_dir)
    if not files:
        return None
    last = files[-1]
    return file_data_end(last.path, file_start=last.start)


def min_offset(store_dir: str | Path) -> int | None:
    """The store's min physical offset: the first file's start (CommitLog.getMinOffset); None without files."""
    files = commitlog_files(store_dir)
    return files[0].start if files else None
