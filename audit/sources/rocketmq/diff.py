"""Spark diff of a RocketMQ master's commit log against its slave's, as small DataFrame transforms.

A slave's commit-log files are byte copies of the master's (HA ships raw bytes), so over the range both
hold the same offsets must hold the same bytes. The diff therefore works in three passes, each a Spark
job with one task per file:

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from audit.diff.spark import arrow_frame
from audit.errors import SourceError
from audit.findings import FINDINGS_SCHEMA, Finding
from audit.sources.rocketmq.contiguity import Hole, holes
from audit.sources.rocketmq.record_diff import (
    Newest,
    at_same_offset,
    bridged_end,
    by_message,
    candidates,
    classify,
    findings_frame,
    ranges,
    received_upto,
    replica_copy_at,
    runs,
)
from audit.sources.rocketmq.spark_store import (
    CHUNK_BYTES,
    MAX_LOOKUP_KEYS,
    Chunk,
    Keep,
    chunk_hashes,
    coalesce_ranges,
    compare_chunks,
    read_store,
)
from audit.sources.rocketmq.store import CommitLogFile

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class StoreDiff:
    findings: DataFrame
    """Rows with the columns of FINDINGS_SCHEMA (run_id, pair and kind left for the pipeline to stamp)."""
    metrics: dict[str, Any] = field(default_factory=dict)
    """Coverage: bytes and records per side, the common range, chunks equal/different, what was compared."""
    cached: tuple[DataFrame, ...] = ()
    """The scans' kept rows, persisted: `findings` reads them. Call release() once the findings are written
    (after it, reading `findings` again parses both stores again)."""

    def release(self) -> None:
        for df in self.cached:
            df.unpersist()


# --- the Spark tasks (run in Python workers; one task per file) -----------------------------------------


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
    holes: tuple[Hole, ...] = ()
    """Where the files do not follow one another (audit/sources/rocketmq/contiguity.py)."""
    deleted: tuple[CommitLogFile, ...] = ()
    """Files listed by the snapshot and gone when read: deleted since (a broker's retention), left out."""

    @property
    def min_offset(self) -> int | None:
        return self.files[0].start if self.files else None

    @property
    def last_data_file(self) -> CommitLogFile | None:
        """The last file holding records or damage; the files after it are preallocated (zeros) or empty."""
        damaged = {int(d["file_start"]) for d in self.damage}
        for f in reversed(self.files):
            if self.ends.get(f.start, f.start) > f.start or f.start in damaged:
                return f
        return self.files[-1] if self.files else None

    @property
    def max_offset(self) -> int | None:
        last = self.last_data_file
        return None if last is None else self.ends.get(last.start)

    @property
    def data_bytes(self) -> int:
        return sum(self.ends[f.start] - f.start for f in self.files if f.start in self.ends)

    def total(self, key: str) -> int:
        return sum(int(s.get(key) or 0) for s in self.summaries.values())

    def not_read(self) -> list[tuple[int, int]]:
        """From each damaged record to its file's end, and every hole between files: bytes this side could
        not read."""
        damaged = [
            (int(d["phys_offset"]), int(d["file_start"]) + self.sizes.get(int(d["file_start"]), 0)) for d in self.damage
        ]
        return damaged + [(h.start, h.end) for h in self.holes if h.start is not None and h.end is not None]

    @property
    def first_store_ts(self) -> int | None:
        values = [s["first_store_ts"] for s in self.summaries.values() if s.get("first_store_ts") is not None]
        return min(values) if values else None

    @property
    def last_store_ts(self) -> int | None:
        values = [s["last_store_ts"] for s in self.summaries.values() if s.get("last_store_ts") is not None]
        return max(values) if values else None

    @property
    def store_hosts(self) -> list[str]:
        return sorted({h for s in self.summaries.values() for h in s.get("store_hosts") or []})


def _learn(files: Sequence[CommitLogFile], rows: DataFrame, unlisted: Sequence[tuple[str, str]] = ()) -> _Side:
    """One small job: the rows that are not records (a few per file)."""
    cols = ["row_kind", "phys_offset", "size", "magic", "file_start", "detail"]
    small = rows.where(F.col("row_kind") != "record").select(*cols).collect()
    gone = {r.file_start for r in small if r.row_kind == "end" and json.loads(r.detail).get("gone")}
    small = [r for r in small if r.file_start not in gone]
    deleted = tuple(f for f in files if f.start in gone)
    files = [f for f in files if f.start not in gone]
    ends = {r.file_start: r.phys_offset for r in small if r.row_kind == "end"}
    sizes = {r.file_start: r.size for r in small if r.row_kind == "end"}
    summaries = {r.file_start: json.loads(r.detail) for r in small if r.row_kind == "end"}
    blanks = {r.phys_offset: r.phys_offset + r.size for r in small if r.row_kind == "blank"}
    damage = tuple(
        sorted(
            (r.asDict() for r in small if r.row_kind in ("corrupt_record", "torn_tail")), key=lambda d: d["phys_offset"]
        )
    )
    found = holes([(f.start, sizes.get(f.start, 0)) for f in files], unlisted)
    return _Side(tuple(files), ends, sizes, summaries, damage, blanks, tuple(found), deleted)


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


def _hole_findings(side: str, s: _Side) -> list[Finding]:
    """One corrupt_record per hole in the side's run of files, at the hole's offsets, naming the file."""
    out = []
    for h in s.holes:
        size = None if h.start is None or h.end is None else h.end - h.start
        evidence = {"side": side, "file": h.file, "position": 0, "reason": h.reason, "not_read_bytes": size}
        out.append(
            Finding(
                "commitlog",
                "corrupt_record",
                start=h.file if h.start is None else str(h.start),
                end=None if h.end is None else str(h.end),
                start_num=h.start,
                end_num=h.end,
                count=1,
                bytes=size,
                evidence={**evidence, **h.evidence},
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


def _with_lead_in(
    plan: tuple[tuple[int, int], ...], replica_start: int, lo: int, chunk_bytes: int
) -> tuple[tuple[int, int], ...]:
    """The slave's ranges to read: the differing chunks, and the chunk before the common range when the
    first of them starts it and the slave holds data before it (the master deleted that file first).
    Where the slave's log is shifted, its copies of the master's first messages in the range lie there."""
    if not plan or plan[0][0] != lo or replica_start >= lo:
        return plan
    return coalesce_ranges([(max(replica_start, lo - chunk_bytes), lo), *plan])


def _record_findings(cands: DataFrame, master: _Side, replica: _Side, equal_upto: int | None) -> DataFrame:
    """The record-level findings: classified candidates, coalesced into ranges, as findings rows."""
    hosts, first_ts = master.store_hosts, master.first_store_ts
    aligned = by_message(at_same_offset(cands), replica_lo=replica.min_offset or 0, replica_hi=replica.max_offset or 0)
    reach = received_upto(cands, equal_upto)
    # Only a slave log that starts the common range and not at offset 0 may have lost its head to retention.
    r_min = replica.min_offset or 0
    head_gone = r_min > 0 and r_min >= (master.min_offset or 0)
    r_first = replica.first_store_ts if head_gone else None
    newest = Newest(first_ts, master.last_store_ts, replica.last_store_ts, r_first, reach)
    head = replica_copy_at(cands, master.min_offset)
    classified = classify(aligned, master_hosts=hosts, newest=newest, master_head_in_replica=head)
    bridged = bridged_end(classified, {"master": master.blanks, "replica": replica.blanks})
    return findings_frame(ranges(runs(bridged), hosts, first_ts))


def diff_stores(
    spark: SparkSession,
    master_files: Sequence[CommitLogFile],
    replica_files: Sequence[CommitLogFile],
    *,
    chunk_bytes: int = CHUNK_BYTES,
    max_lookup_keys: int = MAX_LOOKUP_KEYS,
    unlisted: Mapping[str, Sequence[tuple[str, str]]] | None = None,
) -> StoreDiff:
    """Diff a master's commit log against its slave's (see the module docstring); findings and coverage.

    `unlisted` gives per side the (name, problem) of entries named like a file that could not be read as
    one (audit/sources/rocketmq/store.py, list_store); each is reported with the hole it leaves.
    """
    from pyspark import StorageLevel

    if not master_files or not replica_files:
        raise ValueError("both sides need commit-log files")
    sides = {"master": master_files, "replica": replica_files}
    chunk_rows = compare_chunks(chunk_hashes(spark, sides, chunk_bytes).collect())
    file_lo = max(master_files[0].start, replica_files[0].start)
    file_hi = min(_file_end(master_files[-1]), _file_end(replica_files[-1]))
    plan, _ = _chunk_plan(chunk_rows, file_lo, file_hi)

    level = StorageLevel.MEMORY_AND_DISK
    replica_keep = Keep(_with_lead_in(plan, replica_files[0].start, file_lo, chunk_bytes))
    replica_rows = read_store(spark, replica_files, keep=replica_keep).persist(level)
    unlisted = unlisted or {}
    replica = _learn(replica_files, replica_rows, unlisted.get("replica", ()))
    slave_keys = _lookup_keys(replica, replica_rows, max_lookup_keys)
    keys = slave_keys or frozenset()
    replica_max = replica.max_offset if replica.max_offset is not None else file_lo
    master_plan = coalesce_ranges([(a, min(b, replica_max + 1)) for a, b in plan if a <= replica_max])
    master_rows = read_store(spark, master_files, keep=Keep(master_plan, keys)).persist(level)
    master = _learn(master_files, master_rows, unlisted.get("master", ()))
    for side, s in (("master", master), ("replica", replica)):
        if not s.files:
            raise SourceError(f"{side}: every commit-log file listed was deleted before it could be read")

    lo = max(master.min_offset or 0, replica.min_offset or 0)
    hi = min(master.max_offset or 0, replica.max_offset or 0)
    compare_plan, counts = _chunk_plan(chunk_rows, lo, hi)
    damage = [
        f.to_row(None, None, None)
        for side, s in (("master", master), ("replica", replica))
        for f in _damage_findings(side, s) + _hole_findings(side, s)
    ]
    findings = arrow_frame(spark, pa.Table.from_pylist(damage, schema=FINDINGS_SCHEMA))
    compared_counts = {"m": 0, "r": 0}
    if compare_plan:  # else every chunk of the common range is byte-equal: nothing to compare record by record
        cands = candidates(master_rows, replica_rows, lo, hi, master.not_read(), replica.not_read())
        equal = [c.start for c in chunk_rows if c.equal and lo <= c.start < hi]
        findings = _record_findings(cands, master, replica, max(equal, default=None)).unionByName(findings)
        compared_counts = (
            cands.agg(
                F.count_if(F.col("compared") & (F.col("side") == "master")).alias("m"),
                F.count_if(F.col("compared") & (F.col("side") == "replica")).alias("r"),
            )
            .collect()[0]
            .asDict()
        )

    # A range both sides could not read is not compared once, not twice. Past a side's damage its data
    # may go on, unread: up to what the other side holds it counts as not compared, not as lag.
    not_read = coalesce_ranges(master.not_read() + replica.not_read())
    reach = min(_reach(master), _reach(replica))
    not_compared = sum(max(0, min(b, max(hi, reach)) - max(a, lo)) for a, b in not_read)
    metrics: dict[str, Any] = {
        "master_files": len(master.files),
        "replica_files": len(replica.files),
        "master_files_deleted": len(master.deleted),
        "replica_files_deleted": len(replica.deleted),
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
        "bytes_compared": max(hi - lo, 0) - sum(max(0, min(b, hi) - max(a, lo)) for a, b in not_read),
        "bytes_not_compared": not_compared,
        "master_records_compared": int(compared_counts["m"]),
        "replica_records_compared": int(compared_counts["r"]),
        "master_damaged_records": len(master.damage) + len(master.holes),
        "replica_damaged_records": len(replica.damage) + len(replica.holes),
        "duplicate_lookup": "whole master log" if slave_keys is not None else "differing chunks only",
        # reading stopped at damage in the side's last file: its max offset is where reading stopped
        "master_end_unknown": int(_end_unknown(master)),
        "replica_end_unknown": int(_end_unknown(replica)),
    }
    return StoreDiff(findings=findings, metrics=metrics, cached=(master_rows, replica_rows))


def _corrupt(side: _Side) -> list[dict[str, Any]]:
    """Damage that hides data (a torn tail is where the data ends: nothing follows it)."""
    return [d for d in side.damage if d["row_kind"] == "corrupt_record"]


def _reach(side: _Side) -> int:
    """How far this side's data may go: its readable end, or the end of a file whose reading damage stopped."""
    ends = [int(d["file_start"]) + side.sizes.get(int(d["file_start"]), 0) for d in _corrupt(side)]
    return max([side.max_offset or 0, *ends])


def _end_unknown(side: _Side) -> bool:
    last = side.last_data_file
    return last is not None and any(int(d["file_start"]) == last.start for d in _corrupt(side))


def _file_end(f: CommitLogFile) -> int:
    try:
        return f.start + f.path.stat().st_size
    except FileNotFoundError:  # deleted since it was listed: its scan says so
        return f.start
