"""The Pika layer diagnosis next to one plain Spark pass over the same binlog scans, from the same run.

    .venv/bin/python bench/pika_layers_bench.py [--mb 64] [--findings 10000] [--range 50000]

Generates (once; cached under the temp dir) a master binlog with the write mix of
bench/pika_binlog_bench.py and copies it as the slave's (an identical log: every key is "not applied",
the case where both scans are read furthest). Both are scanned by the snapshot's Spark scan. Then times:

(a) baseline: one pass over both scans, records counted per db and command (what any job over them costs);
(b) `annotate_keyspace` for --findings keys picked from the log, written to Parquet (plus `layer_groups`
    over the resulting findings file);
(c) `keys_of_ranges` for one missing_range of --range records.

Prints seconds, records per second and the ratio to (a), and the driver's and the JVM's peak RSS.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _generator() -> Callable[[Path, int, int], int]:
    spec = importlib.util.spec_from_file_location("pika_binlog_bench", HERE / "pika_binlog_bench.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    generate: Callable[[Path, int, int], int] = mod.generate
    return generate


def _logs(mb: int) -> Path:
    root = Path(tempfile.gettempdir()) / f"pika-layers-bench-{mb}mb"
    if not (root / "complete").exists():
        shutil.rmtree(root, ignore_errors=True)
        started = time.perf_counter()
        n = _generator()(root / "m" / "log_db0", mb, 64)
        shutil.copytree(root / "m", root / "s")
        (root / "complete").write_text(str(n))
        print(f"generated {n:,} records in {time.perf_counter() - started:.1f} s into {root}")
    return root


def _timed(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def _peak_rss_mb(pid: int | None = None) -> float:
    if pid is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=64, help="binlog MiB per side")
    ap.add_argument("--findings", type=int, default=10_000, help="keyspace findings to annotate")
    ap.add_argument("--range", type=int, default=50_000, help="records in the missing_range")
    ap.add_argument("--repeat", type=int, default=2, help="runs per job (the first compiles); the best is reported")
    args = ap.parse_args()

    from pyspark.sql import functions as F

    from audit.diff.spark import get_spark
    from audit.sources.pika.layer_groups import layer_groups
    from audit.sources.pika.layers import annotate_keyspace
    from audit.sources.pika.logfiles import discover, scan_logs
    from audit.sources.pika.range_keys import keys_of_ranges

    root = _logs(args.mb)
    spark = get_spark()
    work = Path(tempfile.mkdtemp(prefix="pika-layers-bench-"))
    scans = []
    for side in ("m", "s"):
        scan_logs(spark, discover(root / side, None, side), str(work / f"{side}.parquet"))
        scans.append(spark.read.parquet(str(work / f"{side}.parquet")))
    m, s = scans
    records = m.where(F.col("row_kind") == "record").count()

    def baseline() -> None:
        both = m.unionByName(s)
        both.groupBy("db", "command").agg(F.count("*")).collect()

    base = [F.lit(x) for x in ("run", "bench", "pika", "keyspace", "missing_on_replica", "critical")]
    names = ["run_id", "pair", "kind", "check", "category", "severity"]
    keys = m.where(F.col("key").isNotNull()).select("db", "key").distinct().limit(args.findings).cache()
    n_keys = keys.count()
    findings = keys.select(
        *[c.alias(n) for c, n in zip(base, names, strict=True)],
        "db",
        "key",
        *[F.lit(None).cast(t).alias(n) for n, t in (("start", "string"), ("end", "string"))],
        *[F.lit(None).cast("long").alias(n) for n in ("start_num", "end_num")],
        F.lit(1).cast("long").alias("count"),
        F.lit(None).cast("long").alias("bytes"),
        *[F.lit(None).cast("string").alias(n) for n in ("master_digest", "replica_digest", "diagnosis")],
        F.lit("{}").alias("detail"),
    )

    def annotate() -> None:
        annotate_keyspace(findings, m, s).write.mode("overwrite").parquet(str(work / "annotated.parquet"))

    head = (
        m.where(F.col("row_kind") == "record")
        .select("filenum", "start", "end")
        .orderBy("filenum", "start")
        .limit(1000 + args.range)
        .collect()
    )
    assert len(head) == 1000 + args.range, "--range is larger than the log"
    first, last = head[1000], head[-1]
    rng = spark.createDataFrame(
        [("run", "bench", "pika", "binlog", "missing_range", "critical", 0, None, None, None, None, args.range)],
        "run_id string, pair string, kind string, check string, category string, severity string, db int, "
        "key binary, start string, end string, bytes long, count long",
    ).select(
        "*",
        F.lit((first["filenum"] << 32) | first["start"]).alias("start_num"),
        F.lit((last["filenum"] << 32) | last["end"]).alias("end_num"),
        *[F.lit(None).cast("string").alias(n) for n in ("master_digest", "replica_digest", "diagnosis")],
        F.lit("{}").alias("detail"),
    )

    def range_keys() -> None:
        keys_of_ranges(rng, m, s).collect()

    t_base = _timed(baseline, args.repeat)
    t_annotate = _timed(annotate, args.repeat)
    t_groups = _timed(lambda: layer_groups(work / "annotated.parquet"), args.repeat)
    t_range = _timed(range_keys, args.repeat)
    gateway = getattr(spark.sparkContext, "_gateway", None)
    jvm_pid = getattr(getattr(gateway, "proc", None), "pid", None)
    print(f"\n{records:,} records per side ({args.mb} MiB), {n_keys:,} findings, a range of {args.range:,} records")
    print(f"best of {args.repeat} runs each (the first run of a job compiles its code)")
    print(f"{'job':<44} {'seconds':>8} {'x baseline':>11} {'records/s':>12}")
    for name, secs in (
        ("baseline: one pass over both scans", t_base),
        (f"annotate_keyspace ({n_keys:,} findings)", t_annotate),
        ("layer_groups over the annotated file", t_groups),
        ("keys_of_ranges (one missing_range)", t_range),
    ):
        print(f"{name:<44} {secs:>8.2f} {secs / t_base:>11.1f} {2 * records / secs:>12,.0f}")
    jvm = f"{_peak_rss_mb(jvm_pid):,.0f} MB" if jvm_pid else "unknown"
    print(
        f"\npeak RSS: driver {_peak_rss_mb():,.0f} MB, JVM {jvm}; load average now {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPUs"
    )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
