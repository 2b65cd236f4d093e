"""Is a side's binlog whole from its first file to its last? Pure: what the scan saw of each file in,
`corrupt_record` findings out (docs/formats/pika-binlog.md, "Damage").

Pika numbers its files without gaps: it moves from `write2file<N>` to `write2file<N+1>` only, and the
first record it writes there embeds the producer position before the move, `(N, length of N)`. Only a
full sync sets the position elsewhere, to the master's `(F, O)`: the first record of `write2file<F>` then
embeds `(F, O)`, or the file starts with padding, and the files below F belong to an earlier life.

So, per side and database, between the first file and the one the manifest names:

- a `write2file<N>` entry that is no readable file (a dangling or looping symlink, a directory) is damage;
- a number with no file, unless the next file starts at a position a full sync set, is a missing file;
- a file shorter than the position the next file's first record says it ended at lost its end.

A file that holds a `corrupt_record` row is measured only for an end it lost: cut mid-record at X
when Pika left it at L > X, the cut record is one finding and `X` to `L` (the rest of the file) another;
bytes past L are its damage rows' own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from audit.findings import Finding
from audit.sources.pika.binlog_format import FILE_PREFIX, ROW_PADDING, ROW_RECORD


@dataclass(frozen=True, slots=True)
class FileFacts:
    """What the scan saw of one file: where its data ends, whether it is damaged, how it begins."""

    filenum: int
    path: str
    data_end: int = 0  # the end of its last row; 0 when it has none
    damaged: bool = False  # it holds a corrupt_record row
    first_kind: str | None = None  # the row_kind of its first row (None: no row)
    first_prev: tuple[int, int] | None = None  # (prev_filenum, prev_offset) of its first row, if a record

    @property
    def set_by_full_sync(self) -> bool:
        """It starts where a full sync (not a rollover) put the producer, or it is empty: files numbered
        below it need not be there."""
        if self.first_kind is None or self.first_kind == ROW_PADDING:
            return True
        return self.first_prev is not None and self.first_prev[0] == self.filenum


def _name(n: int) -> str:
    return f"{FILE_PREFIX}{n}"


def _damage(
    side: str, db: int, at: tuple[int, int], to: tuple[int, int], file: str, reason: str, size: int | None
) -> Finding:
    return Finding(
        "binlog",
        "corrupt_record",
        db=db,
        start=f"{at[0]}:{at[1]}",
        end=f"{to[0]}:{to[1]}",
        start_num=at[0] << 32 | at[1],
        end_num=to[0] << 32 | to[1],
        count=1,
        bytes=size,
        evidence={"side": side, "file": file, "reason": reason},
    )


def _missing_runs(numbers: Iterable[int], cut: int) -> list[tuple[int, int]]:
    """The runs [a, b] of numbers between the lowest of `numbers` and `cut` that are not in `numbers`."""
    have = sorted(set(numbers))
    if not have:
        return []
    runs, expect = [], have[0]
    for n in [*have[1:], cut + 1]:
        if n > expect + 1:
            runs.append((expect + 1, n - 1))
        expect = max(expect, n)
    return runs


def chain_findings(
    side: str,
    db: int,
    directory: str,
    files: Sequence[FileFacts],
    unreadable: Sequence[tuple[int, str, str]],
    cut: int,
) -> list[Finding]:
    """corrupt_record findings for one side's database: unreadable entries, missing files, short files."""
    out = [
        _damage(side, db, (n, 0), (n, 0), path, f"{_name(n)} cannot be read as a binlog file: {why}", None)
        for n, path, why in unreadable
    ]
    present = {f.filenum: f for f in files}
    for a, b in _missing_runs([*present, *(n for n, _, _ in unreadable)], cut):
        after = present.get(b + 1)
        if after is not None and after.set_by_full_sync:
            continue
        names = _name(a) if a == b else f"{_name(a)} to {_name(b)}"
        size = after.first_prev[1] if after and after.first_prev and after.first_prev[0] == b and a == b else None
        why = f"{names} missing: the files are numbered without gaps up to {_name(cut)} (the manifest's or the last)"
        out.append(_damage(side, db, (a, 0), (b + 1, 0), f"{directory}/{_name(a)}", why, size))
    for f in files:
        out += _short(side, db, present.get(f.filenum - 1), f)
    return out


def _short(side: str, db: int, before: FileFacts | None, f: FileFacts) -> list[Finding]:
    """The file before `f` ends elsewhere than where `f`'s first record says it ended."""
    if before is None or f.first_kind != ROW_RECORD or f.first_prev is None:
        return []
    prev_num, prev_end = f.first_prev
    if prev_num != before.filenum or prev_end == before.data_end:
        return []
    if before.damaged and prev_end < before.data_end:
        return []  # what lies past Pika's end (a zero-filled tail) is already a corrupt_record row of its own
    lo, hi = sorted((before.data_end, prev_end))
    why = (
        f"{_name(before.filenum)} ends at {before.data_end}, but {_name(f.filenum)}'s first record says it ended "
        f"at {prev_end} when Pika moved on"
    )
    return [_damage(side, db, (before.filenum, lo), (before.filenum, hi), before.path, why, hi - lo)]
