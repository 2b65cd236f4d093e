"""A RocketMQ store's commit-log files: listing, scanning a file from disk, and the store's offsets.

Files are named by their absolute start offset (20 zero-padded digits), 1 GiB each by default,
preallocated and zero-filled; see audit/sources/rocketmq/format.py for the record layout.
"""

from __future__ import annotations

import errno
import mmap
import os
import re
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa

from audit.sources.rocketmq.contiguity import MAX_OFFSET
from audit.sources.rocketmq.format import FRAME
from audit.sources.rocketmq.scan import DEFAULT_BATCH_BYTES, data_end, iter_batches

_FILE_NAME = re.compile(r"^\d{20}$")


class CommitLogFile(NamedTuple):
    start: int
    path: Path


class Unlisted(NamedTuple):
    """An entry named like a commit-log file that cannot be read as one, and why."""

    name: str
    path: Path
    problem: str


class Listing(NamedTuple):
    files: list[CommitLogFile]
    """The readable regular files, by start offset."""
    unlisted: list[Unlisted]


def _entry(p: Path) -> CommitLogFile | Unlisted:
    """One directory entry named with 20 digits: a file, or why it is none. Permission errors raise."""
    start = int(p.name)
    if start > MAX_OFFSET:
        return Unlisted(p.name, p, "offset beyond 2^63-1, the largest a broker can write")
    try:
        st = p.stat()
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOENT, errno.ENOTDIR):  # a link loop, a dangling link
            return Unlisted(p.name, p, e.strerror or str(e))
        raise
    if not stat.S_ISREG(st.st_mode):
        return Unlisted(p.name, p, "not a regular file")
    return CommitLogFile(start, p)


def commitlog_folders(store_dir: str | Path) -> list[Path]:
    """Each part of `store_dir` (``a;b``): its ``commitlog/`` when it has one, else the part itself.

    Raises OSError (naming the path) when a part cannot be searched, is not a directory or loops.
    """
    folders = []
    for part in str(store_dir).split(";"):
        if not part.strip():
            continue
        root = Path(part.strip())
        folder = root / "commitlog" if (root / "commitlog").is_dir() else root
        if not stat.S_ISDIR(folder.stat().st_mode):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(folder))
        folders.append(folder)
    return folders


def list_store(store_dir: str | Path) -> Listing:
    """The commit-log files of a store, by start offset, and the entries named like one that are none.

    `store_dir` is a store root (holding ``commitlog/``), a commit-log directory itself, or several of
    either joined with ``;`` as in the broker's storePathCommitLog (MultiPathMappedFileQueue). An
    unreadable directory raises OSError; so does a missing one.
    """
    found: dict[int, Path] = {}
    unlisted: list[Unlisted] = []
    for folder in commitlog_folders(store_dir):
        for p in sorted(folder.iterdir()):
            if not _FILE_NAME.match(p.name):
                continue
            entry = _entry(p)
            if isinstance(entry, Unlisted):
                unlisted.append(entry)
            else:
                found.setdefault(entry.start, entry.path)
    return Listing([CommitLogFile(start, found[start]) for start in sorted(found)], unlisted)


def commitlog_files(store_dir: str | Path) -> list[CommitLogFile]:
    """The readable commit-log files of a store, by start offset (see list_store; a missing directory
    is no files here)."""
    try:
        return list_store(store_dir).files
    except FileNotFoundError:
        return []


def map_file(path: str | Path) -> mmap.mmap | None:
    """The file's bytes, mapped read-only (None when it is empty); close with close_map.

    The mapping outlives the file's deletion (a broker's retention may delete it while it is read).
    Raises OSError when the file cannot be opened, FileNotFoundError when it is gone.
    """
    with Path(path).open("rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            return None
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    mm.madvise(mmap.MADV_SEQUENTIAL)
    return mm


def close_map(mm: mmap.mmap | None) -> None:
    try:
        if mm is not None:
            mm.close()
    except BufferError:  # an exported view is still alive somewhere; the mapping goes with it
        pass


def parse_file(
    path: str | Path, *, file_start: int | None = None, last_file: bool = True, batch_bytes: int = DEFAULT_BATCH_BYTES
) -> Iterator[pa.RecordBatch]:
    """Scan one file from disk in batches (mmap: a 1 GiB file costs page cache, not process memory)."""
    p = Path(path)
    start = int(p.name) if file_start is None else file_start
    mm = map_file(p)
    if mm is None:
        return
    try:
        yield from iter_batches(mm, file_start=start, last_file=last_file, batch_bytes=batch_bytes)
    finally:
        close_map(mm)


def file_data_end(path: str | Path, *, file_start: int | None = None, last_file: bool = True) -> int:
    p = Path(path)
    start = int(p.name) if file_start is None else file_start
    return data_end(list(parse_file(p, file_start=start, last_file=last_file)), start)


def unwritten(path: str | Path) -> bool:
    """Whether a file holds no record yet: empty, or zeros where its first record would be.

    A broker creates the file after the one it writes ahead of time (AllocateMappedFileService: full
    size, zeros), so a live store's last file is usually such a file, outside the broker's log until the
    roll. Whatever else a file starting with zeros holds, its own scan reports it.
    """
    try:
        with Path(path).open("rb") as fh:
            return not fh.read(FRAME.size).strip(b"\0")
    except OSError:
        return False  # not known to be empty: the file's own reading says what is wrong with it


def last_data_index(paths: Sequence[str | Path]) -> int:
    """The index of the file a store's data ends in: the last one, less the files after it that hold no
    record yet (see unwritten). A record cut in that file or after it may be one still being written.

    Checked before the files are read: a broker finishes a file (BLANK) before it writes the next, so a
    file found holding data here means the files before it were complete when they were read.
    """
    i = len(paths) - 1
    while i > 0 and unwritten(paths[i]):
        i -= 1
    return max(i, 0)


def max_offset(store_dir: str | Path) -> int | None:
    """The store's max physical offset (MappedFileQueue.getMaxOffset) from its files; None without files."""
    files = commitlog_files(store_dir)
    if not files:
        return None
    last = files[last_data_index([f.path for f in files])]
    return file_data_end(last.path, file_start=last.start)


def min_offset(store_dir: str | Path) -> int | None:
    """The store's min physical offset: the first file's start (CommitLog.getMinOffset); None without files."""
    files = commitlog_files(store_dir)
    return files[0].start if files else None
