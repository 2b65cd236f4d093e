"""Whether a store's commit-log files form one unbroken log, and where they do not. Pure.

Each file is named by the absolute offset of its first byte and holds `mappedFileSizeCommitLog` bytes,
so a file's successor starts where the file ends (name + size); only the last file may be shorter (an
empty last file is a broker that just rolled). Anything else is a hole in the log: bytes no file holds.
The diff reports each hole as a `corrupt_record` of its side at the hole's offsets and leaves the range
out of the comparison ("not compared", never "missing"); see docs/formats/rocketmq-commitlog.md.

An entry named like a commit-log file that cannot be read as one (a symlink loop, a dangling link, a
directory) is "unlisted": its bytes are a hole too, and the hole says which entry it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

MAX_OFFSET = (1 << 63) - 1
"""A commit-log offset is a Java long: a 20-digit name beyond it names no file the broker could load."""
_LISTED_NAMES = 8
"""Missing files named in a hole's evidence (then only their count)."""


def file_name(offset: int) -> str:
    return f"{offset:020d}"


@dataclass(frozen=True, slots=True)
class Hole:
    """Bytes [start, end) of the log that no readable file holds, or an entry that is no file at all.

    `end` is None for an entry outside the run of files (before the first, after the last, or a name
    beyond MAX_OFFSET, whose `start` is then None too): there is no range to leave out of the comparison.
    """

    start: int | None
    end: int | None
    reason: str
    file: str
    evidence: dict[str, Any] = field(default_factory=dict)


def _file_size(files: Sequence[tuple[int, int]]) -> int:
    """The store's file size as the files show it: the largest (the broker creates them all alike)."""
    return max(1, *(size for _, size in files))


def _gap(prev: tuple[int, int], nxt: tuple[int, int], file_size: int, unlisted: dict[int, tuple[str, str]]) -> Hole:
    """What lies between a file's end and its successor's start, named as precisely as the files allow."""
    (start, size), (next_start, _) = prev, nxt
    end = start + size
    base = {"previous_file": file_name(start), "previous_size": size, "next_file": file_name(next_start)}
    if end in unlisted:
        name, problem = unlisted.pop(end)
        return Hole(end, next_start, "unreadable_file", name, {**base, "error": problem})
    if next_start % file_size:  # the broker names files at multiples of the file size
        ev = {**base, "expected_next_file": file_name(start + file_size), "file_size": file_size}
        return Hole(end, next_start, "misplaced_file", file_name(next_start), ev)
    if size == 0:
        return Hole(end, next_start, "empty_file", file_name(start), {**base, "expected_size": file_size})
    if size == file_size:
        names = [file_name(o) for o in range(end, next_start, file_size)]
        ev = {**base, "missing_files": names[:_LISTED_NAMES], "missing_file_count": len(names)}
        return Hole(end, next_start, "missing_file", names[0], ev)
    ev = {**base, "position": size, "expected_size": file_size}
    return Hole(end, next_start, "short_file", file_name(start), ev)


def _unlisted_hole(offset: int | None, name: str, problem: str) -> Hole:
    return Hole(offset, None, "unreadable_file", name, {"error": problem})


def holes(files: Sequence[tuple[int, int]], unlisted: Sequence[tuple[str, str]] = ()) -> list[Hole]:
    """Where (start, size) `files`, sorted by start, fail to follow one another, and every unlisted entry.

    `unlisted` is (name, problem) for each entry named like a file that could not be read as one. A file
    that reaches past its successor's start is `overlapping_files` (both hold those offsets: at least
    one is misnamed); it has no range, as both files are read.
    """
    pending: dict[int, tuple[str, str]] = {}
    out: list[Hole] = []
    for name, problem in unlisted:
        offset = int(name)
        if offset > MAX_OFFSET:
            out.append(Hole(None, None, "name_out_of_range", name, {"error": problem}))
        else:
            pending[offset] = (name, problem)
    if files:
        file_size = _file_size(files)
        for prev, nxt in pairwise(files):
            end = prev[0] + prev[1]
            if end < nxt[0]:
                out.append(_gap(prev, nxt, file_size, pending))
            elif end > nxt[0]:
                ev = {"previous_file": file_name(prev[0]), "previous_size": prev[1], "overlap_bytes": end - nxt[0]}
                out.append(Hole(nxt[0], None, "overlapping_files", file_name(nxt[0]), ev))
    out += [_unlisted_hole(offset, name, problem) for offset, (name, problem) in sorted(pending.items())]
    return sorted(out, key=lambda h: (h.start is None, h.start or 0))
