"""A RocketMQ store read in Spark: one task per commit-log file, chunk hashes, and the records kept.

The first two passes of the store diff (audit/sources/rocketmq/diff.py): every file hashed in fixed
chunks on both sides, then the files scanned keeping only what the comparison needs.
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from pyspark.sql import DataFrame

from audit.diff.task_frame import one_row_per_task
from audit.sources.rocketmq.format import RECORD_SCHEMA
from audit.sources.rocketmq.scan import data_end, iter_batches
from audit.sources.rocketmq.store import CommitLogFile, close_map, last_data_index, map_file

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

CHUNK_BYTES = 4 * 1024 * 1024
"""Bytes per chunk hash; chunks are aligned to each file's start, so both sides cut them alike."""
MAX_LOOKUP_KEYS = 200_000
"""Slave UNIQ_KEYs looked up in the whole master log; beyond this, duplicates are sought in differing chunks only."""
HOSTS_PER_FILE = 16

STORE_SCHEMA = pa.schema(
    [
        *RECORD_SCHEMA,
        ("file_start", pa.int64()),
        ("in_ranges", pa.bool_()),  # a record inside the ranges asked for (else kept for its UNIQ_KEY)
    ]
)
"""read_store's rows: RECORD_SCHEMA plus the file, and one row_kind "end" row per file whose phys_offset
is where the file's valid data ends, size the file's length, and detail a JSON summary (records,
record_bytes, first_store_ts, last_store_ts, store_hosts, keyed_in_ranges)."""

CHUNK_SCHEMA = pa.schema(
    [("file_start", pa.int64()), ("chunk_start", pa.int64()), ("chunk_len", pa.int64()), ("hash", pa.int64())]
)

_FILES_COLUMNS = (("side", "string"), ("path", "string"), ("file_start", "long"), ("last_file", "boolean"))


@dataclass(frozen=True, slots=True)
class Keep:
    """Which records a scan keeps: those overlapping `ranges` (half-open, sorted, disjoint) or carrying one
    of `keys` as UNIQ_KEY. Rows that are not records are always kept."""

    ranges: tuple[tuple[int, int], ...] = ()
    keys: frozenset[str] = frozenset()


def _overlaps(start: np.ndarray, end: np.ndarray, ranges: tuple[tuple[int, int], ...]) -> np.ndarray:
    if not ranges or not len(start):
        return np.zeros(len(start), dtype=bool)
    lo = np.asarray([r[0] for r in ranges], dtype=np.int64)
    hi = np.asarray([r[1] for r in ranges], dtype=np.int64)
    i = np.searchsorted(hi, start, side="right")  # the first range ending after the record starts
    inside = i < len(ranges)
    return inside & (lo[np.minimum(i, len(ranges) - 1)] < end)


def _kept(batch: pa.RecordBatch, keep: Keep | None, keys: pa.Array | None, file_start: int) -> pa.RecordBatch:
    """The rows `keep` asks for, with file_start and in_ranges; `keys` is keep.keys as an Arrow array."""
    n = batch.num_rows
    is_record = np.asarray(pc.equal(batch.column("row_kind"), "record").fill_null(False), dtype=bool)
    if keep is None:
        in_ranges, mask = is_record, np.ones(n, dtype=bool)
    else:
        start = np.asarray(batch.column("phys_offset"), dtype=np.int64)
        in_ranges = is_record & _overlaps(start, start + np.asarray(batch.column("size").fill_null(0)), keep.ranges)
        by_key = np.zeros(n, dtype=bool)
        if keys is not None:
            by_key = np.asarray(pc.is_in(batch.column("uniq_key"), keys).fill_null(False))
        mask = ~is_record | in_ranges | by_key
    out = batch.append_column("file_start", pa.array(np.full(n, file_start, dtype=np.int64))).append_column(
        "in_ranges", pa.array(in_ranges)
    )
    return out if mask.all() else out.filter(pa.array(mask))


def _end_row(file_start: int, end: int, size: int, summary: dict[str, Any]) -> pa.RecordBatch:
    row: dict[str, Any] = {name: [None] for name in STORE_SCHEMA.names}
    row.update(
        row_kind=["end"],
        phys_offset=[end],
        size=[size],
        file_start=[file_start],
        in_ranges=[False],
        detail=[json.dumps(summary, sort_keys=True)],
    )
    return pa.RecordBatch.from_pydict(row, schema=STORE_SCHEMA)


def scan_store_file(path: str, file_start: int, last_file: bool, keep: Keep | None) -> Iterator[pa.RecordBatch]:
    """One file's kept rows (STORE_SCHEMA) and its "end" row; only an end row saying `gone` when the file
    was deleted since it was listed (a broker's retention deletes the oldest files at any moment)."""
    try:
        mm = map_file(path)
    except FileNotFoundError:
        yield _end_row(file_start, file_start, 0, {"gone": True})
        return
    try:
        yield from _scan_mapped(mm, file_start, last_file, keep)
    finally:
        close_map(mm)


def _scan_mapped(mm: mmap.mmap | None, file_start: int, last_file: bool, keep: Keep | None) -> Iterator[pa.RecordBatch]:
    keys = pa.array(sorted(keep.keys), pa.string()) if keep is not None and keep.keys else None
    n_records = record_bytes = 0
    first_ts: int | None = None
    last_ts: int | None = None
    hosts: set[str] = set()
    end = file_start
    keyed = 0  # kept records in the ranges that carry a UNIQ_KEY
    batches = iter_batches(mm, file_start=file_start, last_file=last_file) if mm is not None else iter(())
    for batch in batches:
        end = max(end, data_end(batch, file_start))
        if batch.column("row_kind")[0].as_py() == "record":  # iter_batches: all records, or one other row
            n_records += batch.num_rows
            record_bytes += pc.sum(batch.column("size")).as_py()
            ts = pc.min_max(batch.column("store_ts")).as_py()
            first_ts = ts["min"] if first_ts is None else min(first_ts, ts["min"])
            last_ts = ts["max"] if last_ts is None else max(last_ts, ts["max"])
            if len(hosts) < HOSTS_PER_FILE:
                hosts.update(pc.unique(batch.column("store_host")).to_pylist()[:HOSTS_PER_FILE])
        kept = _kept(batch, keep, keys, file_start)
        if kept.num_rows:
            keyed += pc.sum(pc.and_(kept.column("in_ranges"), pc.is_valid(kept.column("uniq_key")))).as_py() or 0
            yield kept
    summary = {
        "records": n_records,
        "record_bytes": record_bytes,
        "first_store_ts": first_ts,
        "last_store_ts": last_ts,
        "store_hosts": sorted(hosts),
        "keyed_in_ranges": keyed,
    }
    yield _end_row(file_start, end, 0 if mm is None else len(mm), summary)


def _scan_task(keep: Keep | None, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for path, start, last in zip(
            *(batch.column(c).to_pylist() for c in ("path", "file_start", "last_file")), strict=True
        ):
            yield from scan_store_file(path, start, last, keep)


def hash_chunks(path: str, file_start: int, chunk_bytes: int) -> pa.RecordBatch:
    """xxh3_64 of each `chunk_bytes` piece of a file (the last one may be shorter)."""
    starts, lens, hashes = [], [], []
    buf = bytearray(chunk_bytes)
    view = memoryview(buf)
    try:
        with open(path, "rb", buffering=0) as fh:
            pos = 0
            while (n := fh.readinto(buf)) > 0:
                starts.append(file_start + pos)
                lens.append(n)
                hashes.append(xxhash.xxh3_64_intdigest(view[:n]))
                pos += n
    except FileNotFoundError:  # deleted since it was listed (retention): no chunks; its scan says it is gone
        pass
    signed = np.asarray(hashes, dtype=np.uint64).view(np.int64)
    return pa.RecordBatch.from_pydict(
        {"file_start": [file_start] * len(starts), "chunk_start": starts, "chunk_len": lens, "hash": signed},
        schema=CHUNK_SCHEMA,
    )


def _chunk_task(chunk_bytes: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for side, path, start in zip(
            *(batch.column(c).to_pylist() for c in ("side", "path", "file_start")), strict=True
        ):
            hashed = hash_chunks(path, start, chunk_bytes)
            yield hashed.append_column("side", pa.array([side] * hashed.num_rows, pa.string()))


# --- jobs -----------------------------------------------------------------------------------------------


def _spark_schema(schema: pa.Schema) -> StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    spark_schema: StructType = from_arrow_schema(schema)
    return spark_schema


def _files_frame(spark: SparkSession, sides: dict[str, Sequence[CommitLogFile]]) -> DataFrame:
    """One row per file and one partition per row, so each Spark task scans one file (no shuffle needed).

    `last_file` (a cut record is a torn tail) from the file the data ends in on: the files after it are
    preallocated, and one of them may get its first record while the tasks run.
    """
    rows = []
    for side, files in sides.items():
        last = last_data_index([f.path for f in files])
        rows += [(side, str(f.path), f.start, i >= last) for i, f in enumerate(files)]
    return one_row_per_task(spark, _FILES_COLUMNS, rows)


def read_store(spark: SparkSession, files: Sequence[CommitLogFile], *, keep: Keep | None = None) -> DataFrame:
    """The rows of a store's commit-log files (STORE_SCHEMA), parsed in Spark tasks, one per file.

    Without `keep` every record is a row; with it, only the kept ones (see Keep). Paths must be readable
    where the tasks run (local mode, or a shared filesystem on a cluster).
    """
    return _files_frame(spark, {"": files}).mapInArrow(partial(_scan_task, keep), _spark_schema(STORE_SCHEMA))


def chunk_hashes(
    spark: SparkSession, sides: dict[str, Sequence[CommitLogFile]], chunk_bytes: int = CHUNK_BYTES
) -> DataFrame:
    """side, chunk_start, chunk_len and hash of every chunk of every file of each side (one job for all)."""
    schema = CHUNK_SCHEMA.append(pa.field("side", pa.string()))
    return _files_frame(spark, sides).mapInArrow(partial(_chunk_task, chunk_bytes), _spark_schema(schema))


@dataclass(frozen=True, slots=True)
class Chunk:
    start: int
    length: int
    equal: bool


def compare_chunks(rows: Sequence[Any]) -> list[Chunk]:
    """Chunks present on both sides with equal length and hash are equal; every other chunk differs."""
    by_start: dict[int, dict[str, tuple[int, int]]] = {}
    for r in rows:
        by_start.setdefault(int(r.chunk_start), {})[r.side] = (int(r.chunk_len), int(r.hash))
    return [
        Chunk(start, max(v[0] for v in sides.values()), len(sides) == 2 and len(set(sides.values())) == 1)
        for start, sides in sorted(by_start.items())
    ]


def coalesce_ranges(ranges: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


# --- record-level transforms (small DataFrame -> DataFrame functions) -----------------------------------
# No joins: the kept records of both sides are one DataFrame, and two windows (by offset, then by
# message) give each record what the other side holds. A handful of stages, whatever the divergence.
