"""Find a Pika side's binlogs (`<log-path>/log_db<N>/write2file<M>` + `manifest`) and parse them in Spark.

One Spark task per file: a directory of hundreds of 100 MB files parses in parallel, on a cluster too
(the paths must then be readable by the executors). The manifest is read first, so records appended
while the audit runs are past its `pro_offset` and ignored: each side is a consistent cut.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from audit.errors import CorruptRecordError, SnapshotError
from audit.sources.pika.binlog_format import RECORD_SCHEMA, Manifest, binlog_entries, parse_manifest

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_LOG_DIR = re.compile(r"^log_db(\d+)$")
MANIFEST = "manifest"
SCAN_SCHEMA = RECORD_SCHEMA.append(pa.field("idx", pa.int64())).append(pa.field("path", pa.string()))
"""RECORD_SCHEMA plus `idx`, the record's index among the file's real records, and the file's path."""


@dataclass(frozen=True, slots=True)
class LogFile:
    filenum: int
    path: str
    size: int
    logical_end: int | None  # manifest pro_offset for the file being written, else None (read to the end)
    last: bool = True  # the side's last file: a record cut at its end is a torn tail, elsewhere damage


@dataclass(frozen=True, slots=True)
class DbLog:
    db: int
    directory: str
    manifest: Manifest | None
    files: tuple[LogFile, ...]
    unreadable: tuple[tuple[int, str, str], ...] = ()  # (filenum, path, why) of write2file<N> that are no file
    past_cut: tuple[tuple[int, str], ...] = ()  # files there before the manifest was read, numbered past it
    cut: int = 0  # the number of the side's last file: the manifest's pro_num, else the highest found


def _size(path: Path, side: str) -> int:
    """The file's size, once it is known to be readable."""
    try:
        with path.open("rb") as f:
            return os.fstat(f.fileno()).st_size
    except OSError as e:
        raise SnapshotError(f"{side} binlog file {path}: cannot read: {e.strerror}", where=str(path)) from None


def _listing(directory: Path, side: str) -> list[tuple[int, Path, str | None]]:
    try:
        return binlog_entries(directory)
    except OSError as e:
        raise SnapshotError(
            f"{side} binlog directory {directory}: cannot list: {e.strerror}", where=str(directory)
        ) from None


def _manifest(directory: Path, side: str) -> Manifest | None:
    """The manifest's producer position; None when there is no manifest. An unreadable or damaged one is
    a SnapshotError naming the side and the file: without it the side has no consistent cut."""
    path = directory / MANIFEST
    try:
        with path.open("rb") as f:
            data = f.read(64)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise SnapshotError(f"{side} binlog manifest {path}: cannot read: {e.strerror}", where=str(path)) from None
    try:
        return parse_manifest(data)
    except CorruptRecordError as e:
        raise SnapshotError(f"{side} binlog manifest {path} is damaged: {e}", where=str(path)) from None


def _log_dirs(log_root: Path, side: str) -> dict[int, Path]:
    if not log_root.is_dir():
        raise SnapshotError(
            f"{side} binlog directory {log_root} does not exist or is not a directory", where=str(log_root)
        )
    try:
        names = os.listdir(log_root)
    except OSError as e:
        raise SnapshotError(
            f"{side} binlog directory {log_root}: cannot list: {e.strerror}", where=str(log_root)
        ) from None
    found = {int(m.group(1)): log_root / d for d in names if (m := _LOG_DIR.match(d))}
    if not found:  # a wrong path (Pika's root instead of its log/) must not read as an empty, healthy log
        raise SnapshotError(
            f"{side} binlog directory {log_root} holds no log_db<N>/ directory: is it Pika's log directory "
            "(its `log-path`, e.g. /data/pika/log)?",
            where=str(log_root),
        )
    return found


def discover(log_root: Path, dbs: list[int] | None, side: str) -> list[DbLog]:
    """The binlogs of each database under `log_root`; `dbs` None means every `log_db<N>` found."""
    found = _log_dirs(log_root, side)
    wanted = dbs if dbs is not None else sorted(found)
    out = []
    for db in wanted:
        directory = found.get(db)
        if directory is None:
            raise SnapshotError(
                f"{side} binlog directory {log_root} has no log_db{db}/ (found: "
                f"{', '.join(f'log_db{d}' for d in sorted(found)) or 'none'})",
                where=str(log_root),
            )
        out.append(_db_log(db, directory, side))
    return out


def _cut(directory: Path, side: str) -> tuple[Manifest | None, list[tuple[int, Path, str | None]], list[int]]:
    """The manifest, the files after it was read, and the numbers of files listed *before* it was read
    that lie past its pro_num: a stale or damaged manifest, since Pika moves it to a file as it opens it.
    Read twice when there are such files, in case Pika rolled over between the listing and the read."""
    for _ in range(2):
        before = _listing(directory, side)
        manifest = _manifest(directory, side)
        after = _listing(directory, side)
        past = [n for n, _, why in before if why is None and manifest is not None and n > manifest.pro_num]
        if not past:
            break
    return manifest, after, past


def _db_log(db: int, directory: Path, side: str) -> DbLog:
    manifest, entries, past = _cut(directory, side)
    usable = [(n, p) for n, p, why in entries if why is None]
    if not usable:
        raise SnapshotError(
            f"{side} binlog directory {directory} holds no write2file<N>"
            + "".join(f"; {p.name}: {why}" for _, p, why in entries),
            where=str(directory),
        )
    cut = manifest.pro_num if manifest is not None else usable[-1][0]
    files = []
    for filenum, path in usable:
        if filenum > cut:
            continue  # created after the manifest was read: past this side's cut
        end = manifest.pro_offset if manifest is not None and filenum == cut else None
        files.append(LogFile(filenum, str(path), _size(path, side), end, filenum == cut))
    unreadable = tuple((n, str(p), why) for n, p, why in entries if why is not None and n <= cut)
    past_cut = tuple((n, str(p)) for n, p, why in entries if n in past and why is None)
    return DbLog(db, str(directory), manifest, tuple(files), unreadable, past_cut, cut)


def _scan_file(task: dict[str, Any]) -> pa.RecordBatch:
    from audit.sources.pika.binlog import parse_file

    rb = parse_file(
        task["path"], db=task["db"], filenum=task["filenum"], logical_end=task["logical_end"], last=task["last"]
    )
    real = pc.fill_null(
        pc.and_(pc.equal(rb.column("row_kind"), "record"), pc.not_equal(rb.column("command"), "padding")), False
    )
    idx = pc.subtract(pc.cumulative_sum(pc.cast(real, pa.int64())), 1)
    idx = pc.if_else(real, idx, pa.scalar(None, pa.int64()))
    path = pa.repeat(pa.scalar(task["path"], pa.string()), rb.num_rows)
    return pa.RecordBatch.from_arrays([*rb.columns, idx, path], schema=SCAN_SCHEMA)


SCAN_PARQUET_OPTIONS: dict[str, Any] = {
    # The scan is an intermediate file, written once and read once by the diff: encoding speed matters
    # more than size. Measured by bench/pika_binlog_bench.py (one 64 MiB file, pyarrow 26): zstd with
    # default dictionaries and statistics wrote 490 MB of binlog per CPU second, snappy with
    # dictionaries only where values repeat and no min/max of the long strings 1,300-2,400: the parse
    # (~160) is then the whole cost. Snappy is what every Parquet reader has.
    "compression": "snappy",
    "use_dictionary": ["row_kind", "command", "path", "detail"],
    "write_statistics": [c for c in SCAN_SCHEMA.names if c not in ("key", "detail", "path", "command")],
}
"""pyarrow.parquet.write_table options for the scan's part files."""

_DONE_SCHEMA = pa.schema([("db", pa.int32()), ("filenum", pa.int32()), ("rows", pa.int64())])
_TASK_COLUMNS = (
    ("db", "int"),
    ("filenum", "int"),
    ("path", "string"),
    ("logical_end", "long"),
    ("size", "long"),
    ("last", "boolean"),
)


def _scan_partition(out_path: str, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Parse each file and write its rows as one Parquet file straight from the Python worker.

    Handing the rows back to the JVM only to write them costs ten times the parse (Arrow -> rows ->
    Parquet); the task returns one small row per file instead. `out_path` is any filesystem pyarrow
    knows (a local/NFS path, s3://, hdfs://), so this runs unchanged on a cluster with shared storage.
    """
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    fs, root = pafs.FileSystem.from_uri(out_path) if "://" in out_path else (pafs.LocalFileSystem(), out_path)
    for batch in batches:
        for task in batch.to_pylist():
            rb = _scan_file(task)
            name = f"{root}/part-db{task['db']}-{task['filenum']:010d}.parquet"
            pq.write_table(pa.Table.from_batches([rb]), name, filesystem=fs, **SCAN_PARQUET_OPTIONS)
            yield pa.RecordBatch.from_pylist(
                [{"db": task["db"], "filenum": task["filenum"], "rows": rb.num_rows}], schema=_DONE_SCHEMA
            )


def scan_logs(spark: SparkSession, logs: list[DbLog], out_path: str) -> dict[str, Any]:
    """Parse every file of `logs` in Spark (one task per file) into Parquet at `out_path`."""
    import functools
    import shutil

    from pyspark.sql.pandas.types import from_arrow_schema

    from audit.diff.task_frame import one_row_per_task

    if "://" not in out_path:
        shutil.rmtree(out_path, ignore_errors=True)
        Path(out_path).mkdir(parents=True)
    tasks = [(log.db, f.filenum, f.path, f.logical_end, f.size, f.last) for log in logs for f in log.files]
    if not tasks:
        empty = spark.createDataFrame([], from_arrow_schema(SCAN_SCHEMA))
        empty.write.mode("overwrite").parquet(out_path)
        return {"files": 0, "bytes": 0, "rows": 0}
    # biggest files first, so the last task to start is a small one (partition i holds task i)
    tasks.sort(key=lambda t: -t[4])
    df = one_row_per_task(spark, _TASK_COLUMNS, tasks)
    done = df.mapInArrow(functools.partial(_scan_partition, out_path), from_arrow_schema(_DONE_SCHEMA)).collect()
    return {
        "files": len(tasks),
        "bytes": sum(t[4] if t[3] is None else t[3] for t in tasks),
        "rows": sum(r["rows"] for r in done),
    }


def read_scan(spark: SparkSession, path: str) -> DataFrame:
    return spark.read.parquet(path)


def producer_positions(logs: list[DbLog]) -> dict[int, tuple[int, int] | None]:
    """Per db, the manifest's (pro_num, pro_offset): what `INFO replication` reports as binlog_offset."""
    return {log.db: (log.manifest.pro_num, log.manifest.pro_offset) if log.manifest else None for log in logs}
