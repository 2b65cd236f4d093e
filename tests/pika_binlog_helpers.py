"""Single-record conveniences over the Pika binlog scan, for the tests: rows as objects, a per-file summary."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from audit.sources.pika.binlog import scan_binlog
from audit.sources.pika.binlog_format import ROW_CORRUPT, ROW_PADDING, ROW_RECORD, ROW_TORN


@dataclass(frozen=True, slots=True)
class BinlogRecord:
    """One row of RECORD_SCHEMA, for convenient single-record use (the columnar scan is the fast path)."""

    row_kind: str
    db: int
    filenum: int
    start: int
    end: int
    exec_time: int | None
    term: int | None
    logic_id: int | None
    prev_filenum: int | None
    prev_offset: int | None
    content_len: int | None
    digest: int | None
    command: str | None
    key: bytes | None
    detail: str | None


def iter_records(
    data: bytes | bytearray | memoryview, *, db: int, filenum: int, logical_end: int | None = None
) -> Iterator[BinlogRecord]:
    """The rows of `scan_binlog` as BinlogRecord objects."""
    for row in scan_binlog(data, db=db, filenum=filenum, logical_end=logical_end).to_pylist():
        yield BinlogRecord(**row)


def summarize(batch: pa.RecordBatch, *, file_size: int | None = None) -> dict[str, Any]:
    """Counts and positions of one file's scan: what a per-file line of a report needs."""
    rows = batch.to_pydict()
    kinds: list[str] = rows["row_kind"]
    starts: list[int] = rows["start"]
    ends: list[int] = rows["end"]
    records = [k for k, kind in enumerate(kinds) if kind == ROW_RECORD]
    good = [k for k, kind in enumerate(kinds) if kind in (ROW_RECORD, ROW_PADDING)]
    logical_end = ends[good[-1]] if good else 0
    out: dict[str, Any] = {
        "records": len(records),
        "first_record_start": starts[records[0]] if records else None,
        "logical_end": logical_end,
        "padding_bytes": sum(ends[k] - starts[k] for k, kind in enumerate(kinds) if kind == ROW_PADDING),
        "corrupt_records": kinds.count(ROW_CORRUPT),
        "torn_tail": kinds.count(ROW_TORN) > 0,
    }
    if file_size is not None:
        out["zero_tail_bytes"] = max(0, file_size - max([logical_end, *ends]))
    return out
