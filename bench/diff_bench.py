"""Spark keyspace diff throughput on two synthetic snapshots, next to a Spark baseline from the same run.

    .venv/bin/python bench/diff_bench.py [--rows 10000000] [--quick] [--conf spark.sql.shuffle.partitions=16 ...]

Generates master/replica `keys.parquet` files of N rows (SNAPSHOT_SCHEMA) with planted differences:
0.1% changed digest, 0.05% missing on the replica, 0.05% extra on the replica, 0.05% TTL drift.
Then runs, in the same process: Spark baselines (count, distinct keys), the oldest diff job (every
column through the join; skipped with --no-wide), the first pass alone as it was (each side's latest
read by its own aggregate, then a sort-merge join) and as it is (one aggregate over both sides' reads),
the diff as `RedisSource.diff` runs it (diff_snapshots), and DuckDB's full
outer join of the same files (`pip install duckdb` into the venv: a bench-only dependency; skipped
with a note when absent). Checks the candidates against the plant; prints peak RSS (driver and JVM).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from audit import defaults
from audit.diff import keyspace
from audit.diff.keyspace import diff_snapshots, diff_snapshots_wide
from audit.diff.spark import configure, get_spark
from audit.sources.redis.snapshot import SNAPSHOT_SCHEMA

TARGET_S, TARGET_ROWS, DUCKDB_RATIO = 30.0, 10_000_000, 3.0
T0 = 1_700_000_000_000
TYPES = pa.array(["string"] * 14 + ["hash", "hash", "list", "list", "set", "zset"])
HEX = np.array([b"%02x" % i for i in range(256)], dtype="S2")


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser, vectorised: a deterministic pseudo-random uint64 per id."""
    z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def hex32(a: np.ndarray, b: np.ndarray) -> pa.Array:
    """32-hex-character strings from two uint64 arrays, built straight into Arrow buffers."""
    raw = np.stack([a, b], axis=1).view(np.uint8)  # (n, 16)
    data = HEX[raw].tobytes()
    offsets = np.arange(0, 32 * (len(a) + 1), 32, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), len(a), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def chunk(ids: np.ndarray, n: int, replica: bool) -> pa.Table:
    h = mix(ids)
    has_ttl = ids % 5 == 0
    skew = 250 if replica else 0  # the replica is read a little later; its PTTL is that much smaller
    read_at = T0 + ids // 100 + skew
    ttl = (3_600_000 + h % np.uint64(3_600_000)).astype(np.int64) - skew
    key_ids = ids
    digest_seed = np.zeros_like(h)
    if replica:
        ttl = np.where(ids % 2000 == 5, ttl + 10_000, ttl)  # ttl drift
        key_ids = np.where(ids % 2000 == 3, n + ids // 2000, ids)  # missing + extra
        digest_seed = np.where(ids % 1000 == 1, np.uint64(77), digest_seed)  # changed value
    keys = pc.binary_join_element_wise("key:", pc.cast(pa.array(key_ids), pa.string()), "").cast(pa.binary())
    cols = {
        "db": pa.array(np.zeros(len(ids), np.int32)),
        "key": keys,
        "type": TYPES.take(pa.array(h % np.uint64(len(TYPES)))),
        "ttl_ms": pa.array(ttl, mask=~has_ttl),
        "expire_at_ms": pa.array(read_at + ttl, mask=~has_ttl),
        "length": pa.array((5 + (h >> np.uint64(8)) % np.uint64(96)).astype(np.int64)),
        "digest": hex32(mix(h ^ digest_seed), mix(h + np.uint64(1) + digest_seed)),
        "status": pa.array(["ok"]).take(pa.array(np.zeros(len(ids), np.int32))),
        "error": pa.nulls(len(ids), pa.string()),
        "read_at_ms": pa.array(read_at),
    }
    return pa.table(cols, schema=SNAPSHOT_SCHEMA)


def generate(path: Path, n: int, replica: bool, step: int = 1_000_000) -> None:
    with pq.ParquetWriter(path, SNAPSHOT_SCHEMA, compression="zstd") as w:
        for lo in range(0, n, step):
            w.write_table(chunk(np.arange(lo, min(n, lo + step), dtype=np.int64), n, replica))


def planted(n: int) -> dict[str, int]:
    ids = np.arange(n, dtype=np.int64)
    missing = int(np.count_nonzero(ids % 2000 == 3))
    return {
        "value_mismatch": int(np.count_nonzero(ids % 1000 == 1)),
        "missing_on_replica": missing,
        "extra_on_replica": missing,
        "ttl_mismatch": int(np.count_nonzero(ids % 2000 == 5)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=TARGET_ROWS)
    ap.add_argument("--conf", action="append", default=[], metavar="K=V", help="extra Spark setting (repeatable)")
    ap.add_argument("--quick", action="store_true", help="1M rows per side")
    ap.add_argument("--no-wide", action="store_true", help="skip the previous job (the slowest baseline)")
    args = ap.parse_args()
    if args.quick:
        args.rows = 1_000_000
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at start")
    configure(conf=dict(c.split("=", 1) for c in args.conf))
    with tempfile.TemporaryDirectory(prefix="diff-bench-") as tmp:
        m_path, r_path, out = Path(tmp) / "master.parquet", Path(tmp) / "replica.parquet", Path(tmp) / "cand"
        started = time.perf_counter()
        generate(m_path, args.rows, replica=False)
        generate(r_path, args.rows, replica=True)
        size_mb = (m_path.stat().st_size + r_path.stat().st_size) / 1e6
        print(f"generated 2 x {args.rows:,} rows ({size_mb:,.0f} MB) in {time.perf_counter() - started:.1f} s")

        spark = get_spark()
        spark.range(1000).selectExpr("id % 7 AS k").distinct().count()  # JVM start and warm-up, untimed
        paths = [str(m_path), str(r_path)]
        timings: list[tuple[str, float]] = []

        t = time.perf_counter()
        counts = [spark.read.parquet(p).count() for p in paths]
        timings.append(("baseline: read.parquet.count() x2", time.perf_counter() - t))
        t = time.perf_counter()
        distinct = [spark.read.parquet(p).select("key").distinct().count() for p in paths]
        timings.append(("baseline: select(key).distinct.count x2", time.perf_counter() - t))

        if not args.no_wide:
            t = time.perf_counter()
            diff_snapshots_wide(spark, *paths, str(out) + "-wide", defaults.TTL_TOLERANCE_MS)
            timings.append(("previous diff job (every column joined)", time.perf_counter() - t))
        for name, pair in (
            ("first pass: two aggregates + join (previous)", two_aggregates_and_join),
            ("first pass: one aggregate (narrow_pair)", one_aggregate),
        ):
            t = time.perf_counter()
            first_pass(pair(spark, paths), str(out) + "-first")
            timings.append((name, time.perf_counter() - t))
        t = time.perf_counter()
        coverage = diff_snapshots(spark, *paths, str(out), defaults.TTL_TOLERANCE_MS)  # what RedisSource.diff runs
        timings.append(("replica-audit diff (total)", time.perf_counter() - t))
        duck = duckdb_join(paths)
        if duck is not None:
            timings.append(("duckdb full outer join + classify", duck))

        base = timings[1][1]
        print(
            f"\nrows per side: {counts} (distinct keys {distinct}); Spark conf: "
            f"shuffle.partitions={spark.conf.get('spark.sql.shuffle.partitions')}, "
            f"driver.memory={spark.conf.get('spark.driver.memory')}, master={spark.conf.get('spark.master')}"
        )
        print(f"\n{'method':<46} {'seconds':>8} {'rows/s per side':>16} {'vs distinct':>12}")
        for name, secs in timings:
            print(f"{name:<46} {secs:>8.2f} {args.rows / secs:>16,.0f} {secs / base:>11.2f}x")

        want = planted(args.rows)
        got = {r["category"]: r["count"] for r in spark.read.parquet(str(out)).groupBy("category").count().collect()}
        print(f"\ncandidates: {coverage['candidates']:,} found, {sum(want.values()):,} planted")
        for cat in sorted(set(want) | set(got)):
            print(f"  {cat:<20} found {got.get(cat, 0):>8,}  planted {want.get(cat, 0):>8,}")
        print(f"coverage: { {k: v for k, v in coverage.items() if k != 'candidates'} }")
        if got != want:
            print("MISMATCH: candidates differ from the planted differences")
        peak_rss_report(_jvm_pid(spark))
        total = next(secs for name, secs in timings if name.startswith("replica-audit"))
        if duck is not None:
            print(f"replica-audit diff / duckdb: {total / duck:.2f}x (target <= {DUCKDB_RATIO:.0f}x)")
        else:
            print("duckdb not installed: `.venv/bin/pip install duckdb` for that baseline (bench only)")
        scaled = f" (at {args.rows:,} rows; scale before judging)" if args.rows != TARGET_ROWS else ""
        print(
            f"\ntarget: 10M keys per side diffed in < {TARGET_S:.0f} s: {total:.1f} s, "
            f"reached {'yes' if total < TARGET_S and args.rows >= TARGET_ROWS else 'no'}{scaled}"
        )


def two_aggregates_and_join(spark: SparkSession, paths: list[str]) -> DataFrame:
    """The previous first pass: each side's latest read by its own aggregate, then a sort-merge full outer join."""
    sides = []
    for side, path in enumerate(paths):
        rows = keyspace._narrow_rows(keyspace._read(spark, path), "full", side)
        latest = [F.max_by(c, "order").alias(c) for c in keyspace.NARROW_COLUMNS]
        sides.append(rows.groupBy("db", "key").agg(*latest, F.count(F.lit(1)).alias("reads")))
    return keyspace.join_sides(*sides)


def one_aggregate(spark: SparkSession, paths: list[str]) -> DataFrame:
    """The current first pass (what diff_snapshots runs)."""
    master, replica = (keyspace._read(spark, p) for p in paths)
    return keyspace.narrow_pair(master, replica)


def first_pass(joined: DataFrame, out: str) -> None:
    """Classify the joined sides and write the candidates' keys, as diff_snapshots' first pass does."""
    classified = keyspace.classify(joined, defaults.TTL_TOLERANCE_MS)
    keyspace.candidates(classified).select("db", "key", "category").write.mode("overwrite").parquet(out)


def _jvm_pid(spark: object) -> int | None:
    import psutil

    for child in psutil.Process().children(recursive=True):
        if "java" in child.name():
            return int(child.pid)
    return None


def duckdb_join(paths: list[str]) -> float | None:
    """Seconds for DuckDB to full-outer-join the two files by (db, key) and count each category."""
    try:
        import duckdb
    except ImportError:
        return None
    con = duckdb.connect()
    started = time.perf_counter()
    con.execute(
        f"""
        WITH m AS (SELECT db, key, arg_max(struct_pack(type, digest, length, expire_at_ms, status), read_at_ms) v
                   FROM read_parquet('{paths[0]}') GROUP BY db, key),
             r AS (SELECT db, key, arg_max(struct_pack(type, digest, length, expire_at_ms, status), read_at_ms) v
                   FROM read_parquet('{paths[1]}') GROUP BY db, key)
        SELECT CASE WHEN r.key IS NULL THEN 'missing' WHEN m.key IS NULL THEN 'extra'
                    WHEN m.v.type <> r.v.type THEN 'type' WHEN m.v.digest <> r.v.digest OR m.v.length <> r.v.length
                    THEN 'value' WHEN abs(m.v.expire_at_ms - r.v.expire_at_ms) > 2000
                    OR (m.v.expire_at_ms IS NULL) <> (r.v.expire_at_ms IS NULL) THEN 'ttl' END AS category,
               count(*)
        FROM m FULL OUTER JOIN r ON m.db = r.db AND m.key = r.key GROUP BY ALL
        """
    ).fetchall()
    return time.perf_counter() - started


def peak_rss_report(spark_pid: int | None) -> None:
    import resource

    import psutil

    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    jvm = ""
    if spark_pid:
        try:
            jvm = f"; Spark JVM RSS now {psutil.Process(spark_pid).memory_info().rss / 2**20:,.0f} MB"
        except psutil.NoSuchProcess:
            pass
    print(f"peak RSS of this process (driver, duckdb) {me:,.0f} MB{jvm}")


if __name__ == "__main__":
    main()
