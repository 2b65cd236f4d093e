"""Keyspace diff: a full outer join of two key snapshots by (db, key), as small DataFrame transforms.

Each transform is `DataFrame -> DataFrame`, testable on a handful of rows (chispa style). The result
of :func:`classify` holds one row per key with a `category` (null when both sides agree); the caller
keeps the non-null rows as recheck candidates and aggregates the rest into coverage metrics.

:func:`diff_snapshots` (the job) sends only fixed-width columns through the shuffle (:func:`narrow_pair`):
per read a hash of the type (`th`), a status code (`st`), the absolute expiry, one 64-bit hash of
(digest, length) (`vh`) and the read time, instead of the 32-character digest, the TTL, the length and
the error text. Fixed-width columns let the SCAN-duplicate step and the join be one hash aggregate over
both sides' reads (a `max_by` per column and side) rather than sorts, which bench/diff_bench.py
measured faster at each step. The few keys that differ then get
their full columns back from the snapshots, by a join with the candidates (in the driver, with Arrow,
when they are few and the files local: audit/diff/candidate_columns.py). The output is the same as
classifying the full columns (tests/unit/test_keyspace_diff.py); a difference hides behind a hash only
if two different values collide in 64 bits.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from audit.diff.candidate_columns import MAX_DRIVER_CANDIDATES, SIDE_PREFIXES, full_columns_in_driver, is_local

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

VALUE_COLUMNS = ("type", "ttl_ms", "expire_at_ms", "length", "digest", "status", "error", "read_at_ms")


def latest_read(snapshot: DataFrame) -> DataFrame:
    """SCAN may return a key twice: keep the later read of each (db, key)."""
    values = [c for c in snapshot.columns if c not in ("db", "key")]
    latest = F.max_by(F.struct(*values), "read_at_ms").alias("v")
    # Shuffling by (db, key) first lets the aggregate and the join reuse one partitioning and sort
    # (measured by bench/diff_bench.py: 10M rows per side went from 93 s to under 60 s).
    grouped = snapshot.repartition("db", "key").groupBy("db", "key").agg(latest, F.count(F.lit(1)).alias("reads"))
    return grouped.select("db", "key", "v.*", "reads")


STATUS_CODES = {"ok": 0, "unstable": 1, "error": 2}
_ORDER_SHIFT = 1 << 19  # read_at_ms (< 2**44 until the year 2527) times this, plus 19 bits of vh, fits a long


def _narrow_rows(snapshot: DataFrame, mode: str, side: int) -> DataFrame:
    """Each read as fixed-width columns, tagged with its side (0 master, 1 replica)."""
    st = F.lit(len(STATUS_CODES))
    for name, code in reversed(STATUS_CODES.items()):
        st = F.when(F.col("status") == name, F.lit(code)).otherwise(st)
    th, expire = F.xxhash64("type"), F.col("expire_at_ms")
    vh = F.xxhash64("digest", "length") if mode == "full" else F.xxhash64("length")
    if mode == "keys":
        th, vh, expire = F.lit(0).cast("long"), F.xxhash64("key"), F.lit(None).cast("long")
        st = F.when(F.col("status") == "error", F.lit(STATUS_CODES["error"])).otherwise(F.lit(STATUS_CODES["ok"]))
    return snapshot.select(
        "db",
        "key",
        F.lit(side).alias("side"),
        th.alias("th"),
        st.alias("st"),
        expire.alias("expire_at_ms"),
        vh.alias("vh"),
        "read_at_ms",
        (F.col("read_at_ms") * F.lit(_ORDER_SHIFT) + F.pmod(vh, F.lit(_ORDER_SHIFT))).alias("order"),
    )


NARROW_COLUMNS = ("th", "st", "expire_at_ms", "vh", "read_at_ms")


def narrow_pair(master: DataFrame, replica: DataFrame, mode: str = "full") -> DataFrame:
    """The joined sides as fixed-width columns m_*/r_*: th, st, expire_at_ms, vh, read_at_ms, reads.

    One aggregate by (db, key) over both sides' reads does the SCAN-duplicate step and the full outer
    join at once: one shuffle, no sort (docs/performance.md has the measurements against two aggregates
    and a sort-merge join). A side's columns are null where it lacks the key (`max_by` skips the rows
    whose ordering is null, the other side's). The later read wins; reads within the same millisecond
    are told apart by the low bits of `vh`, so every column comes from the same read. The compare mode
    (audit/diff/compare_modes.py) decides what the columns carry: `length` hashes the element count
    instead of the value, `keys` keeps presence and readability only (type, value, status `unstable`
    and expiry then always agree).
    """
    # Shuffled as they are, before any aggregate: a partial aggregate per input split would shuffle
    # buffers twice the rows' width and gain nothing, as nearly every key is read once per side.
    rows = _narrow_rows(master, mode, 0).unionByName(_narrow_rows(replica, mode, 1)).repartition("db", "key")
    latest = []
    for side, prefix in enumerate(("m_", "r_")):
        mine = F.col("side") == side
        order = F.when(mine, F.col("order"))
        latest += [F.max_by(c, order).alias(prefix + c) for c in NARROW_COLUMNS]
        # a sum of nulls only is null: `reads` is null, like the other columns, where the side lacks the key
        latest.append(F.sum(F.when(mine, F.lit(1).cast("long"))).alias(prefix + "reads"))
    return rows.groupBy("db", "key").agg(*latest)


def _prefixed(df: DataFrame, prefix: str) -> DataFrame:
    return df.select("db", "key", *[F.col(c).alias(f"{prefix}{c}") for c in df.columns if c not in ("db", "key")])


def join_sides(master: DataFrame, replica: DataFrame) -> DataFrame:
    """Full outer join: columns m_* and r_*; a side's columns are null where it lacks the key."""
    return _prefixed(master, "m_").join(_prefixed(replica, "r_"), on=["db", "key"], how="full_outer")


def ttl_differs(tolerance_ms: int) -> Column:
    """The two expiries differ: one side has none, or they are further apart than the tolerance."""
    m, r = F.col("m_expire_at_ms"), F.col("r_expire_at_ms")
    one_sided = m.isNull() != r.isNull()
    drift = m.isNotNull() & r.isNotNull() & (F.abs(m - r) > F.lit(tolerance_ms))
    return one_sided | drift


class _Terms:
    """The comparison's terms over full columns (type, status, digest, length) or narrow ones (th, st, vh)."""

    def __init__(self, columns: list[str]) -> None:
        self.coded = "m_st" in columns

    def present(self, p: str) -> Column:
        return F.col(f"{p}th" if self.coded else f"{p}type").isNotNull()

    def error(self, p: str) -> Column:
        return F.col(f"{p}st") == STATUS_CODES["error"] if self.coded else F.col(f"{p}status") == "error"

    def unstable(self, p: str) -> Column:
        return F.col(f"{p}st") == STATUS_CODES["unstable"] if self.coded else F.col(f"{p}status") == "unstable"

    @property
    def type_differs(self) -> Column:
        return F.col("m_th") != F.col("r_th") if self.coded else F.col("m_type") != F.col("r_type")

    @property
    def content_differs(self) -> Column:
        if self.coded:
            return F.col("m_vh") != F.col("r_vh")
        return (F.col("m_digest") != F.col("r_digest")) | (F.col("m_length") != F.col("r_length"))


def classify(joined: DataFrame, ttl_tolerance_ms: int) -> DataFrame:
    """Add `category`: missing_on_replica, extra_on_replica, type_mismatch, value_mismatch, ttl_mismatch.

    Keys unreadable on either side (status error) get no category: they are not compared, and count
    as uncovered in the metrics instead. An `unstable` read is a value_mismatch candidate: the
    recheck re-reads it.
    """
    t = _Terms(joined.columns)
    unreadable = t.error("m_") | t.error("r_")
    value_differs = t.content_differs | t.unstable("m_") | t.unstable("r_")
    category = (
        F.when(unreadable, F.lit(None))
        .when(~t.present("r_"), F.lit("missing_on_replica"))
        .when(~t.present("m_"), F.lit("extra_on_replica"))
        .when(t.type_differs, F.lit("type_mismatch"))
        .when(value_differs, F.lit("value_mismatch"))
        .when(ttl_differs(ttl_tolerance_ms), F.lit("ttl_mismatch"))
    )
    return joined.withColumn("category", category).withColumn("unreadable", unreadable)


def coverage_aggregates(columns: list[str] | None = None) -> list[Column]:
    """Keys per side, keys compared, keys unreadable, duplicate SCAN reads, candidates.

    `columns`: the classified frame's columns (full ones when None)."""
    t = _Terms(columns or [])
    m_present, r_present = t.present("m_"), t.present("r_")
    return [
        F.count_if(m_present).alias("master_keys"),
        F.count_if(r_present).alias("replica_keys"),
        F.count_if(m_present & r_present & ~F.col("unreadable")).alias("keys_compared"),
        F.count_if(t.error("m_")).alias("master_keys_unreadable"),
        F.count_if(t.error("r_")).alias("replica_keys_unreadable"),
        F.coalesce(F.sum(F.col("m_reads") - 1), F.lit(0)).alias("master_scan_duplicates"),
        F.coalesce(F.sum(F.col("r_reads") - 1), F.lit(0)).alias("replica_scan_duplicates"),
        F.count_if(F.col("category").isNotNull()).alias("candidates"),
    ]


def coverage_metrics(classified: DataFrame) -> DataFrame:
    """The coverage aggregates as a one-row DataFrame."""
    return classified.agg(*coverage_aggregates())


def candidates(classified: DataFrame) -> DataFrame:
    return classified.where(F.col("category").isNotNull()).drop("unreadable")


SNAPSHOT_DDL = (
    "db int, key binary, type string, ttl_ms bigint, expire_at_ms bigint, length bigint, digest string, "
    "status string, error string, read_at_ms bigint"
)
"""SNAPSHOT_SCHEMA (audit/sources/redis/snapshot.py) for Spark: pushed to the reader, nothing inferred."""


def _read(spark: SparkSession, path: str) -> DataFrame:
    return spark.read.schema(SNAPSHOT_DDL).parquet(path)


def _with_full_columns(spark: SparkSession, narrow_candidates: DataFrame, paths: tuple[str, str]) -> DataFrame:
    """Candidates (db, key, category, m_/r_read_at_ms, m_/r_reads) with every column of each side's read."""
    out = narrow_candidates
    for prefix, path in zip(SIDE_PREFIXES, paths, strict=True):
        on = ["db", "key", f"{prefix}read_at_ms"]
        full = _read(spark, path).select("db", "key", *[F.col(c).alias(f"{prefix}{c}") for c in VALUE_COLUMNS])
        # An outer join cannot broadcast its preserved side, so `candidates LEFT JOIN snapshot` shuffled
        # the whole snapshot for a few rows. The inner join may broadcast the few candidates (Spark
        # decides by their size) and the left join that keeps candidates absent on a side is small-small.
        found = full.join(narrow_candidates.select(*on).where(F.col(on[2]).isNotNull()), on=on, how="inner")
        out = out.join(found, on=on, how="left")
    columns = [f"{p}{c}" for p in SIDE_PREFIXES for c in (*VALUE_COLUMNS, "reads")]
    # a key read twice in the same millisecond would match twice: keep one
    return out.dropDuplicates(["db", "key"]).select("db", "key", *columns, "category")


def diff_snapshots(
    spark: SparkSession,
    master_path: str,
    replica_path: str,
    candidates_path: str,
    ttl_tolerance_ms: int,
    mode: str = "full",
    max_driver_candidates: int = MAX_DRIVER_CANDIDATES,
) -> dict[str, int]:
    """The keyspace diff job: write the candidates, return the coverage counts.

    Two passes: the narrow join classifies every key and observes the coverage counts while it writes
    the candidates' keys and read times (no cache: it cost more than the join; bench/diff_bench.py),
    then those few rows get their full columns from the snapshots: in the driver with Arrow for up to
    `max_driver_candidates` of them on local files (audit/diff/candidate_columns.py), else a Spark
    job. `mode` is the pair's compare mode (audit/diff/compare_modes.py): what it does not compare
    makes no candidate.
    """
    from pyspark.sql import Observation

    joined = narrow_pair(_read(spark, master_path), _read(spark, replica_path), mode)
    classified = classify(joined, ttl_tolerance_ms)
    coverage = Observation("coverage")
    keys_path = candidates_path.rstrip("/") + ".keys"
    keys = candidates(classified.observe(coverage, *coverage_aggregates(classified.columns))).select(
        "db", "key", "category", "m_read_at_ms", "r_read_at_ms", "m_reads", "r_reads"
    )
    keys.write.mode("overwrite").parquet(keys_path)
    counts = {k: int(v or 0) for k, v in coverage.get.items()}
    if "candidates" not in counts:
        # A Spark Connect 4.1 server waits 100 ms for a write's observed metrics, then answers without
        # them (SPARK-54279): on a busy server the counts are then aggregated again, in a second job.
        (row,) = classified.agg(*coverage_aggregates(classified.columns)).collect()  # a global aggregate: one row
        counts = {k: int(v or 0) for k, v in row.asDict().items()}
    paths = (master_path, replica_path, keys_path, candidates_path)
    if counts["candidates"] <= max_driver_candidates and all(map(is_local, paths)):
        full_columns_in_driver(keys_path, (master_path, replica_path), SNAPSHOT_DDL, VALUE_COLUMNS, candidates_path)
    else:
        full = _with_full_columns(spark, spark.read.parquet(keys_path), (master_path, replica_path))
        # a healthy pair has no candidate: then an empty file of the same schema, without reading the snapshots again
        (full if counts["candidates"] else full.limit(0)).write.mode("overwrite").parquet(candidates_path)
    if is_local(keys_path):
        shutil.rmtree(keys_path, ignore_errors=True)
    return counts


def diff_snapshots_wide(
    spark: SparkSession, master_path: str, replica_path: str, candidates_path: str, ttl_tolerance_ms: int
) -> dict[str, int]:
    """The previous job (every column through the join), kept as the bench's same-run baseline."""
    from pyspark.sql import Observation

    sides = [latest_read(spark.read.parquet(p)) for p in (master_path, replica_path)]
    classified = classify(join_sides(*sides), ttl_tolerance_ms)
    coverage = Observation("coverage")
    candidates(classified.observe(coverage, *coverage_aggregates())).write.mode("overwrite").parquet(candidates_path)
    return {k: int(v or 0) for k, v in coverage.get.items()}
