"""Spark diff of a RocketMQ master's commit log against its slave's, as small DataFrame transforms.

A slave's commit-log files are byte copies of the master's (HA ships raw bytes, reference/rocketmq.md
§2.5), so over the range both hold the same offsets must hold the same bytes. The diff therefore works
in three passes, each a Spark job with one task per file:

1. chunk hashes: every file is hashed in fixed chunks (4 MiB) on both sides; equal chunks are done;
2. the slave's files are scanned, keeping the records of differing chunks (plus every BLANK, damaged
   record and a per-file summary row); then the master's, keeping the records of differing chunks and
   the records whose UNIQ_KEY one of those slave records carries (to tell a duplicate from a stray);
3. the kept records are compared record by record and classified, and contiguous runs become one finding.

Categories: ``missing_range`` (master records the slave lacks, master coordinates), ``duplicate_range``
(slave records that repeat a message the slave already holds elsewhere, slave coordinates),
``divergent_entry`` (the same message with other bytes, or a slave record no rule explains),
``stale_replica_data`` (slave records of another master: other store host, or older than the master's
log), and every ``corrupt_record`` / ``torn_tail`` of either side. A damaged record stops the reading
of its file, so the rest of that file is "not compared", never "missing".
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from audit.diff.findings import severity_of
from audit.findings import FINDING_COLUMNS, FINDINGS_SCHEMA, Finding
from audit.sources.rocketmq.commitlog import RECORD_SCHEMA, CommitLogFile, data_end, parse_file

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

_FILES_DDL = "side string, path string, file_start long, last_file boolean"


@dataclass(frozen=True, slots=True)
class Keep:
    """Which records a scan keeps: those overlapping `ranges` (half-open, sorted, disjoint) or carrying one
    of `keys` as UNIQ_KEY. Rows that are not records are always kept."""

    ranges: tuple[tuple[int, int], ...] = ()
    keys: frozenset[str] = frozenset()


@dataclass(frozen=True)
class StoreDiff:
    findings: DataFrame
    """Rows with the columns of FINDINGS_SCHEMA."""
    metrics: dict[str, Any] = field(default_factory=dict)
    """Coverage: bytes and records per side, the common range, chunks equal/different, what was compared."""
    cached: tuple[DataFrame, ...] = ()
    """The scans' kept rows, persisted: `findings` reads them. Call release() once the findings are written
    (after it, reading `findings` again parses both stores again)."""

    def release(self) -> None:
        for df in self.cached:
            df.unpersist()


# --- the Spark tasks (run in Python workers; one task per file) -----------------------------------------


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


def _end_row(path: str, file_start: int, end: int, summary: dict[str, Any]) -> pa.RecordBatch:
    row: dict[str, Any] = {name: [None] for name in STORE_SCHEMA.names}
    row.update(
        row_kind=["end"],
        phys_offset=[end],
        size=[Path(path).stat().st_size],
        file_start=[file_start],
        in_ranges=[False],
        detail=[json.dumps(summary, sort_keys=True)],
    )
    return pa.RecordBatch.from_pydict(row, schema=STORE_SCHEMA)


def scan_store_file(path: str, file_start: int, last_file: bool, keep: Keep | None) -> Iterator[pa.RecordBatch]:
    """One file's kept rows (STORE_SCHEMA) and its "end" row."""
    keys = pa.array(sorted(keep.keys), pa.string()) if keep is not None and keep.keys else None
    n_records = record_bytes = 0
    first_ts: int | None = None
    last_ts: int | None = None
    hosts: set[str] = set()
    end = file_start
    keyed = 0  # kept records in the ranges that carry a UNIQ_KEY
    for batch in parse_file(path, file_start=file_start, last_file=last_file):
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
    yield _end_row(path, file_start, end, summary)


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
    with open(path, "rb", buffering=0) as fh:
        pos = 0
        while (n := fh.readinto(buf)) > 0:
            starts.append(file_start + pos)
            lens.append(n)
            hashes.append(xxhash.xxh3_64_intdigest(view[:n]))
            pos += n
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
    """One row per file and one partition per row, so each Spark task scans one file (no shuffle needed)."""
    rows = [
        (side, str(f.path), f.start, i == len(files) - 1) for side, files in sides.items() for i, f in enumerate(files)
    ]
    return spark.createDataFrame(spark.sparkContext.parallelize(rows, max(len(rows), 1)), _FILES_DDL)


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


def identity() -> Column:
    """A message's identity across replicas: UNIQ_KEY, else what the producer and the queue fixed."""
    fallback = F.concat_ws("|", "topic", "queue_id", "queue_offset", "born_ts", "born_host")
    return F.coalesce(F.col("uniq_key"), fallback)


def records(rows: DataFrame) -> DataFrame:
    return rows.where(F.col("row_kind") == "record").withColumn("ident", identity())


def _compared(lo: int, hi: int, other_not_read: Sequence[tuple[int, int]]) -> Column:
    """In a differing chunk, starting in [lo, hi), and not where the other side could not be read."""
    cond = F.col("in_ranges") & (F.col("phys_offset") >= lo) & (F.col("phys_offset") < hi)
    end = F.col("phys_offset") + F.col("size")
    for a, b in other_not_read:
        cond = cond & ~((F.col("phys_offset") < b) & (end > a))
    return cond


_CANDIDATE_COLUMNS = (
    "side",
    "compared",
    "in_ranges",
    "phys_offset",
    "size",
    "digest",
    "ident",
    "uniq_key",
    "store_host",
    "store_ts",
    "topic",
)


def candidates(
    master_rows: DataFrame,
    replica_rows: DataFrame,
    lo: int,
    hi: int,
    master_not_read: Sequence[tuple[int, int]],
    replica_not_read: Sequence[tuple[int, int]],
) -> DataFrame:
    """The kept records of both sides, `side` master|replica, `compared` for those compared one by one.

    The master's rows include records outside the differing chunks kept for their UNIQ_KEY (not compared).
    """
    m = records(master_rows).withColumns({"side": F.lit("master"), "compared": _compared(lo, hi, replica_not_read)})
    r = (
        records(replica_rows)
        .where(F.col("in_ranges"))
        .withColumns({"side": F.lit("replica"), "compared": _compared(lo, hi, master_not_read)})
    )
    return m.select(*_CANDIDATE_COLUMNS).unionByName(r.select(*_CANDIDATE_COLUMNS))


def at_same_offset(cands: DataFrame) -> DataFrame:
    """Add what the other side's compared record at the same offset holds: other_digest, `same` (byte-equal)
    and `same_message` (same identity, other bytes)."""
    w = Window.partitionBy("phys_offset")
    mine = F.col("side")

    def other(col: str) -> Column:
        return F.max(F.when(F.col("compared") & (mine != F.lit("master")), F.col(col))).over(w)

    def master(col: str) -> Column:
        return F.max(F.when(F.col("compared") & (mine == F.lit("master")), F.col(col))).over(w)

    def pick(col: str) -> Column:
        return F.when(mine == "master", other(col)).otherwise(master(col))

    with_other = cands.withColumns(
        {"other_digest": pick("digest"), "other_size": pick("size"), "other_ident": pick("ident")}
    )
    same = F.col("compared") & (F.col("digest") == F.col("other_digest")) & (F.col("size") == F.col("other_size"))
    same_message = F.col("compared") & ~same & (F.col("ident") == F.col("other_ident"))
    return with_other.withColumns(
        {"same": F.coalesce(same, F.lit(False)), "same_message": F.coalesce(same_message, F.lit(False))}
    )


def by_message(aligned: DataFrame, *, replica_lo: int, replica_hi: int) -> DataFrame:
    """Add, per record, what the other side holds of the same message anywhere:

    - `replica_has`: the slave holds the message in its differing chunks (a master record that is not at
      its offset there is then shifted, not missing);
    - `in_master`: the master holds it at another offset y; `duplicate`: and the slave holds it at y too
      (y in an equal chunk inside the slave's range, or a byte-equal record there); `original_offset`.
    """
    peers = F.collect_list(F.struct("side", "phys_offset", "in_ranges", "same")).over(Window.partitionBy("ident"))
    x = F.col("phys_offset")

    def held(y: Column) -> Column:
        in_equal_chunk = ~y["in_ranges"] & (y["phys_offset"] >= replica_lo) & (y["phys_offset"] < replica_hi)

        def equal_record(q: Column) -> Column:
            return (q["side"] == "replica") & (q["phys_offset"] == y["phys_offset"]) & q["same"]

        equal_there = F.exists(F.col("peers"), equal_record)
        return in_equal_chunk | equal_there

    elsewhere = F.filter(F.col("peers"), lambda p: (p["side"] == "master") & (p["phys_offset"] != x))
    held_at = F.transform(F.filter(F.col("elsewhere"), held), lambda y: y["phys_offset"])
    return (
        aligned.withColumn("peers", peers)
        .withColumn("elsewhere", elsewhere)
        .withColumns(
            {
                "replica_has": F.exists(F.col("peers"), lambda p: p["side"] == "replica"),
                "in_master": F.size(F.col("elsewhere")) > 0,
                "original_offset": F.array_min(held_at),
            }
        )
        .withColumn("duplicate", F.size(held_at) > 0)
        .drop("peers", "elsewhere")
    )


def classify(df: DataFrame, *, master_hosts: Sequence[str], master_first_ts: int | None) -> DataFrame:
    """The category of each compared record that is not byte-equal at its offset (null: no finding).

    Master records: divergent_entry (the slave has the same message there with other bytes), missing_range
    (the slave holds the message nowhere), or nothing (shifted). Slave records that are not the master's
    message there: duplicate_range, nothing (shifted: held by the master elsewhere), stale_replica_data
    (another store host than any of the master's, or older than the master's first record), else
    divergent_entry.
    """
    hosts = F.array(*[F.lit(h) for h in master_hosts]) if master_hosts else F.array().cast("array<string>")
    foreign_host = F.lit(bool(master_hosts)) & ~F.array_contains(hosts, F.col("store_host"))
    older = F.lit(master_first_ts is not None) & (F.col("store_ts") < F.lit(master_first_ts or 0))
    is_master = F.col("side") == "master"
    category = (
        F.when(~F.col("compared") | F.col("same"), F.lit(None))
        .when(F.col("same_message"), F.when(is_master, F.lit("divergent_entry")))  # reported once, by the master
        .when(is_master, F.when(~F.col("replica_has"), F.lit("missing_range")))
        .when(F.col("duplicate"), F.lit("duplicate_range"))
        .when(F.col("in_master"), F.lit(None))
        .when(foreign_host | older, F.lit("stale_replica_data"))
        .otherwise(F.lit("divergent_entry"))
    )
    return df.withColumns(
        {
            "category": category,
            "foreign_host": F.when(~is_master, foreign_host),
            "older_than_master": F.when(~is_master, older),
        }
    ).where(F.col("category").isNotNull())


def bridged_end(classified: DataFrame, blanks: dict[str, dict[int, int]]) -> DataFrame:
    """Add `next_start`: where the next record of the same side starts, past a BLANK at a file's end."""
    end = F.col("phys_offset") + F.col("size")
    after = F.lit(None).cast("long")
    for side, where in blanks.items():
        if where:
            lookup = F.create_map(*[F.lit(v) for kv in sorted(where.items()) for v in kv])
            after = F.when(F.col("side") == side, lookup[end]).otherwise(after)
    return classified.withColumn("next_start", F.coalesce(after, end))


def runs(classified: DataFrame) -> DataFrame:
    """Contiguous records of one category and side become one run: gaps and islands over the offsets."""
    order = Window.partitionBy("side", "category").orderBy("phys_offset")
    new_run = F.coalesce(F.lag("next_start").over(order) != F.col("phys_offset"), F.lit(True))
    return classified.withColumn("run", F.sum(new_run.cast("long")).over(order))


def _hex(col: Column) -> Column:
    return F.lower(F.lpad(F.hex(col), 16, "0"))


def ranges(runs_df: DataFrame, master_hosts: Sequence[str], master_first_ts: int | None) -> DataFrame:
    """One row per run: [start, end), count, bytes, what each side holds, and the evidence."""
    grouped = runs_df.groupBy("side", "category", "run").agg(
        F.min("phys_offset").alias("start_num"),
        F.max(F.col("phys_offset") + F.col("size")).alias("end_num"),
        F.count(F.lit(1)).alias("count"),
        F.sum("size").alias("bytes"),
        F.expr("bit_xor(digest)").alias("own_digest"),
        F.expr("bit_xor(other_digest)").alias("other_xor"),
        F.count("other_digest").alias("other_count"),
        F.min_by("uniq_key", "phys_offset").alias("first_uniq_key"),
        F.max_by("uniq_key", "phys_offset").alias("last_uniq_key"),
        F.min("store_ts").alias("store_ts_min"),
        F.max("store_ts").alias("store_ts_max"),
        F.sort_array(F.collect_set("store_host")).alias("store_hosts"),
        F.sort_array(F.collect_set("topic")).alias("topics"),
        F.max("foreign_host").alias("foreign_host"),
        F.max("older_than_master").alias("older_than_master"),
        F.min("original_offset").alias("original_offset"),
    )
    other = F.when(F.col("other_count") > 0, _hex(F.col("other_xor")))
    own = _hex(F.col("own_digest"))
    is_master = F.col("side") == "master"
    stale = F.col("category") == "stale_replica_data"
    hosts = F.array(*[F.lit(h) for h in master_hosts]) if master_hosts else F.array().cast("array<string>")
    evidence = F.struct(
        F.col("side"),
        F.col("first_uniq_key"),
        F.col("last_uniq_key"),
        F.col("store_ts_min"),
        F.col("store_ts_max"),
        F.col("store_hosts"),
        F.col("topics"),
        F.when(stale, F.lit(True)).alias("other_master"),
        F.when(stale, F.col("foreign_host")).alias("foreign_store_host"),
        F.when(stale, F.col("older_than_master")).alias("older_than_master"),
        F.when(stale, hosts).alias("master_store_hosts"),
        F.when(stale, F.lit(master_first_ts)).alias("master_first_store_ts"),
        F.when(F.col("category") == "duplicate_range", F.col("original_offset")).alias("first_original_offset"),
    )
    return grouped.select(
        "category",
        "start_num",
        "end_num",
        "count",
        "bytes",
        F.when(is_master, own).otherwise(other).alias("master_digest"),
        F.when(is_master, other).otherwise(own).alias("replica_digest"),
        F.to_json(evidence).alias("detail"),
    )


def findings_frame(ranges_df: DataFrame, run_id: str, pair: str, kind: str = "rocketmq") -> DataFrame:
    """Range rows as rows of the findings schema (check `commitlog`)."""
    return ranges_df.select(
        F.lit(run_id).alias("run_id"),
        F.lit(pair).alias("pair"),
        F.lit(kind).alias("kind"),
        F.lit("commitlog").alias("check"),
        F.col("category"),
        severity_of(F.col("category")).alias("severity"),
        F.lit(None).cast("int").alias("db"),
        F.lit(None).cast("binary").alias("key"),
        F.col("start_num").cast("string").alias("start"),
        F.col("end_num").cast("string").alias("end"),
        F.col("start_num").cast("long").alias("start_num"),
        F.col("end_num").cast("long").alias("end_num"),
        F.col("count").cast("long").alias("count"),
        F.col("bytes").cast("long").alias("bytes"),
        F.col("master_digest"),
        F.col("replica_digest"),
        F.lit(None).cast("string").alias("diagnosis"),
        F.col("detail"),
    ).select(*FINDING_COLUMNS)


# --- the whole diff -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Side:
    """What the driver learns from a scan's non-record rows (a handful per file)."""

    files: tuple[CommitLogFile, ...]
    ends: dict[int, int]
    sizes: dict[int, int]
    summaries: dict[int, dict[str, Any]]
    damage: tuple[dict[str, Any], ...]
    blanks: dict[int, int]
    """BLANK offset -> the end of its file."""

    @property
    def min_offset(self) -> int | None:
        return self.files[0].start if self.files else None

    @property
    def max_offset(self) -> int | None:
        return self.ends.get(self.files[-1].start) if self.files else None

    @property
    def data_bytes(self) -> int:
        return sum(self.ends[f.start] - f.start for f in self.files if f.start in self.ends)

    def total(self, key: str) -> int:
        return sum(int(s.get(key) or 0) for s in self.summaries.values())

    def not_read(self) -> list[tuple[int, int]]:
        """From each damaged record to its file's end: bytes this side could not read."""
        return [
            (int(d["phys_offset"]), int(d["file_start"]) + self.sizes.get(int(d["file_start"]), 0)) for d in self.damage
        ]

    @property
    def first_store_ts(self) -> int | None:
        values = [s["first_store_ts"] for s in self.summaries.values() if s.get("first_store_ts") is not None]
        return min(values) if values else None

    @property
    def store_hosts(self) -> list[str]:
        return sorted({h for s in self.summaries.values() for h in s.get("store_hosts") or []})


def _learn(files: Sequence[CommitLogFile], rows: DataFrame) -> _Side:
    """One small job: the rows that are not records (a few per file)."""
    cols = ["row_kind", "phys_offset", "size", "magic", "file_start", "detail"]
    small = rows.where(F.col("row_kind") != "record").select(*cols).collect()
    ends = {r.file_start: r.phys_offset for r in small if r.row_kind == "end"}
    sizes = {r.file_start: r.size for r in small if r.row_kind == "end"}
    summaries = {r.file_start: json.loads(r.detail) for r in small if r.row_kind == "end"}
    blanks = {r.phys_offset: r.phys_offset + r.size for r in small if r.row_kind == "blank"}
    damage = tuple(
        sorted(
            (r.asDict() for r in small if r.row_kind in ("corrupt_record", "torn_tail")), key=lambda d: d["phys_offset"]
        )
    )
    return _Side(tuple(files), ends, sizes, summaries, damage, blanks)


def _lookup_keys(side: _Side, rows: DataFrame, limit: int) -> frozenset[str] | None:
    """The UNIQ_KEYs of the slave's records in differing chunks, unless there are more than `limit`."""
    n = side.total("keyed_in_ranges")
    if n > limit:
        return None
    if n == 0:
        return frozenset()
    keyed = rows.where((F.col("row_kind") == "record") & F.col("in_ranges") & F.col("uniq_key").isNotNull())
    return frozenset(r.uniq_key for r in keyed.select("uniq_key").collect())


def _damage_findings(side: str, s: _Side) -> list[Finding]:
    out = []
    for d in s.damage:
        start, size = int(d["phys_offset"]), d["size"]
        file_end = int(d["file_start"]) + s.sizes.get(int(d["file_start"]), 0)
        fits = size is not None and size > 0 and start + size <= file_end
        scan = json.loads(d["detail"]) if d["detail"] else {}
        evidence = {
            "side": side,
            "file": f"{int(d['file_start']):020d}",
            "position": start - int(d["file_start"]),
            "declared_size": size,
            "magic": None if d["magic"] is None else d["magic"] & 0xFFFFFFFF,
            "not_read_bytes": file_end - start,
            **scan,
        }
        out.append(
            Finding(
                "commitlog",
                d["row_kind"],
                start=str(start),
                end=str(start + size) if fits else None,
                start_num=start,
                end_num=start + size if fits else None,
                count=1,
                bytes=size if fits else None,
                evidence=evidence,
            )
        )
    return out


def _chunk_plan(chunks: list[Chunk], lo: int, hi: int) -> tuple[tuple[tuple[int, int], ...], dict[str, int]]:
    """Differing chunk ranges within [lo, hi) and the chunk counts over that range."""
    differ: list[tuple[int, int]] = []
    counts = {"chunks_compared": 0, "chunks_equal": 0, "chunks_different": 0, "bytes_equal_by_hash": 0}
    for c in chunks:
        a, b = c.start, c.start + c.length
        if b <= lo or a >= hi:
            continue
        counts["chunks_compared"] += 1
        if c.equal:
            counts["chunks_equal"] += 1
            counts["bytes_equal_by_hash"] += min(b, hi) - max(a, lo)
        else:
            counts["chunks_different"] += 1
            differ.append((max(a, lo), min(b, hi)))
    return coalesce_ranges(differ), counts


def _record_findings(cands: DataFrame, master: _Side, replica: _Side, names: tuple[str, str, str]) -> DataFrame:
    """The record-level findings: classified candidates, coalesced into ranges, as findings rows."""
    hosts, first_ts = master.store_hosts, master.first_store_ts
    aligned = by_message(at_same_offset(cands), replica_lo=replica.min_offset or 0, replica_hi=replica.max_offset or 0)
    classified = classify(aligned, master_hosts=hosts, master_first_ts=first_ts)
    bridged = bridged_end(classified, {"master": master.blanks, "replica": replica.blanks})
    return findings_frame(ranges(runs(bridged), hosts, first_ts), *names)


def diff_stores(
    spark: SparkSession,
    master_files: Sequence[CommitLogFile],
    replica_files: Sequence[CommitLogFile],
    *,
    run_id: str = "",
    pair: str = "",
    kind: str = "rocketmq",
    chunk_bytes: int = CHUNK_BYTES,
    max_lookup_keys: int = MAX_LOOKUP_KEYS,
) -> StoreDiff:
    """Diff a master's commit log against its slave's (see the module docstring); findings and coverage."""
    from pyspark import StorageLevel

    if not master_files or not replica_files:
        raise ValueError("both sides need commit-log files")
    sides = {"master": master_files, "replica": replica_files}
    chunk_rows = compare_chunks(chunk_hashes(spark, sides, chunk_bytes).collect())
    file_lo = max(master_files[0].start, replica_files[0].start)
    file_hi = min(_file_end(master_files[-1]), _file_end(replica_files[-1]))
    plan, _ = _chunk_plan(chunk_rows, file_lo, file_hi)

    level = StorageLevel.MEMORY_AND_DISK
    replica_rows = read_store(spark, replica_files, keep=Keep(plan)).persist(level)
    replica = _learn(replica_files, replica_rows)
    slave_keys = _lookup_keys(replica, replica_rows, max_lookup_keys)
    keys = slave_keys or frozenset()
    replica_max = replica.max_offset if replica.max_offset is not None else file_lo
    master_plan = coalesce_ranges([(a, min(b, replica_max + 1)) for a, b in plan if a <= replica_max])
    master_rows = read_store(spark, master_files, keep=Keep(master_plan, keys)).persist(level)
    master = _learn(master_files, master_rows)

    lo = max(master.min_offset or 0, replica.min_offset or 0)
    hi = min(master.max_offset or 0, replica.max_offset or 0)
    compare_plan, counts = _chunk_plan(chunk_rows, lo, hi)
    damage = [
        f.to_row(run_id, pair, kind) for f in _damage_findings("master", master) + _damage_findings("replica", replica)
    ]
    findings = spark.createDataFrame(pa.Table.from_pylist(damage, schema=FINDINGS_SCHEMA))
    compared_counts = {"m": 0, "r": 0}
    if compare_plan:  # else every chunk of the common range is byte-equal: nothing to compare record by record
        cands = candidates(master_rows, replica_rows, lo, hi, master.not_read(), replica.not_read())
        findings = _record_findings(cands, master, replica, (run_id, pair, kind)).unionByName(findings)
        compared_counts = (
            cands.agg(
                F.count_if(F.col("compared") & (F.col("side") == "master")).alias("m"),
                F.count_if(F.col("compared") & (F.col("side") == "replica")).alias("r"),
            )
            .collect()[0]
            .asDict()
        )

    not_compared = sum(max(0, min(b, hi) - max(a, lo)) for a, b in master.not_read() + replica.not_read())
    metrics: dict[str, Any] = {
        "master_files": len(master_files),
        "replica_files": len(replica_files),
        "master_min_offset": master.min_offset,
        "master_max_offset": master.max_offset,
        "replica_min_offset": replica.min_offset,
        "replica_max_offset": replica.max_offset,
        "master_bytes": master.data_bytes,
        "replica_bytes": replica.data_bytes,
        "master_records": master.total("records"),
        "replica_records": replica.total("records"),
        "common_start": lo,
        "common_end": max(hi, lo),
        "common_bytes": max(hi - lo, 0),
        "chunk_bytes": chunk_bytes,
        **counts,
        "bytes_compared": max(hi - lo, 0) - not_compared,
        "bytes_not_compared": not_compared,
        "master_records_compared": int(compared_counts["m"]),
        "replica_records_compared": int(compared_counts["r"]),
        "master_damaged_records": len(master.damage),
        "replica_damaged_records": len(replica.damage),
        "duplicate_lookup": "whole master log" if slave_keys is not None else "differing chunks only",
    }
    return StoreDiff(findings=findings, metrics=metrics, cached=(master_rows, replica_rows))


def _file_end(f: CommitLogFile) -> int:
    return f.start + f.path.stat().st_size
