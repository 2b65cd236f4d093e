"""The Pika binlog diff (the diff stage of a files-only Pika pair), next to the same diff staged the way it
was before, in the same process run.

    .venv/bin/python bench/pika_diff_bench.py [--records 1000000] [--dbs 1] [--repeat 3] [--healthy] [--before REV]

Writes (once; cached under the temp dir, keyed by the options) a master binlog of `--records` records per
database (SET/HSET/INCR/LPUSH/PEXPIRE on 10k keys, 40-byte values, 64 MiB files) and a slave binlog
with a 1,000-record gap and a replayed batch of 500 in each database (`--healthy`: a faithful slave,
the common case, aligned by position alone). Both sides are scanned once (the snapshot stage's job);
then, alternately, `--repeat` times each:

- "files (before)": every intermediate frame of the alignment written as Parquet and read back (what the
  check did before, and still does on a cluster);
- "current": the check's own staging (audit/diff/materialize.py: a local checkpoint on a local master);
- with `--before REV`: REV's binlog diff (audit/sources/pika/binlog_diff.py and, from when the alignment
  moved there, binlog_align.py, at REV, imported beside this tree's) with this tree's staging: what the
  alignment itself changed.

Both skip the passes with nothing left to match; how many frames were staged is printed.

Each run does what the diff stage does with the result: writes the findings, counts the matched
records by kind and collects the lag. Printed: wall seconds (best and median), records per second of
both sides, the findings found (which must agree), the process tree's CPU seconds, peak RSS.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from datasets import peak_rss_mb
from pika_binlog_bench import tree_cpu_s

from audit.local.pika_binlog import BinlogWriter

ROOT = Path(__file__).resolve().parent.parent
FILE_SIZE = 64 << 20
T0 = 1_700_000_000
GAP, REPLAY = 1_000, 500
STAGED: dict[str, int] = {}  # frames staged in the last run of each mode


def command(i: int, db: int) -> list[bytes]:
    key = b"db%d:key:%06d" % (db, i % 10_007)
    kind = i % 5
    if kind == 0:
        return [b"set", key, (b"v%d-" % i).ljust(40, b"x")]
    if kind == 1:
        return [b"hset", b"db%d:hash:%d" % (db, i % 101), b"f%d" % i, b"%d" % i]
    if kind == 2:
        return [b"incr", b"db%d:counter:%d" % (db, i % 7)]
    if kind == 3:
        return [b"lpush", b"db%d:list:%d" % (db, i % 13), b"e%d" % i]
    return [b"pexpire", key, b"100000"]


def slave_plan(n: int, healthy: bool) -> list[int]:
    """Master indexes in the slave's order: a gap at 40% of the log and a batch replayed at 70%."""
    if healthy:
        return list(range(n))
    gap_at, replay_at = int(n * 0.4), int(n * 0.7)
    kept = [i for i in range(n) if not gap_at <= i < gap_at + GAP]
    at = kept.index(replay_at)
    return kept[:at] + kept[at - REPLAY : at] + kept[at:]


def generate(root: Path, n: int, dbs: int, healthy: bool) -> None:
    for db in range(dbs):
        cmds = [command(i, db) for i in range(n)]
        for side, order, term in (("m", range(n), 1), ("s", slave_plan(n, healthy), 0)):
            w = BinlogWriter(root / side / f"log_db{db}", file_size=FILE_SIZE, preallocate=True, term=term)
            for i in order:
                w.append(cmds[i], exec_time=T0 + i // 1000)
            w.close(trim=False)


def files_stage(spark: Any, work: Path) -> Callable[[Any, str], Any]:
    def stage(df: Any, name: str) -> Any:
        path = str(work / f"{name}.parquet")
        df.write.mode("overwrite").parquet(path)
        return spark.read.parquet(path)

    return stage


def revision_module(rev: str) -> ModuleType:
    """`audit/sources/pika/binlog_diff.py` as it is at `rev`, imported beside this tree's (its other imports
    resolve to this tree's modules), with `rev`'s own alignment (binlog_align.py) where it has one."""
    align = _source_at(rev, "audit/sources/pika/binlog_align.py")
    name = "audit.sources.pika.binlog_align"
    ours = sys.modules.get(name)
    if align is not None:
        sys.modules[name] = _load("binlog_align_at_rev", align)  # what rev's `from ... import` reads
    try:
        diff = _source_at(rev, "audit/sources/pika/binlog_diff.py")
        assert diff is not None, f"{rev} has no audit/sources/pika/binlog_diff.py"
        return _load("binlog_diff_at_rev", diff)
    finally:
        if ours is not None:
            sys.modules[name] = ours


def _source_at(rev: str, path: str) -> bytes | None:
    shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], capture_output=True)
    return shown.stdout if shown.returncode == 0 else None


def _load(name: str, source: bytes) -> ModuleType:
    path = Path(tempfile.mkdtemp(prefix="pika-diff-rev-")) / f"{name}.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def diff_once(
    spark: Any, m: Any, s: Any, dbs: int, work: Path, mode: str, at_rev: ModuleType | None = None
) -> tuple[float, dict[str, int]]:
    from pyspark.sql import functions as F

    from audit.diff.materialize import stager
    from audit.sources.pika import binlog_diff as this_tree
    from audit.sources.pika.binlog_check import file_bases, file_ends

    binlog_diff = at_rev if mode == "rev" and at_rev is not None else this_tree
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.perf_counter()
    bases = file_bases(file_ends(m, s))
    stage = files_stage(spark, work) if mode == "files" else stager(spark, work)
    staged: list[str] = []

    def counted(df: Any, name: str) -> Any:
        staged.append(name)
        return stage(df, name)

    result = binlog_diff.binlog_findings(m, s, dbs, bases, counted)
    result.findings.write.mode("overwrite").parquet(str(work / "findings.parquet"))
    where = F.when(F.col("m_epos") == F.col("s_epos"), "same").otherwise("shifted")
    result.matched.groupBy(where.alias("w")).agg(F.count("*")).collect()
    result.lag.collect()
    took = time.perf_counter() - started
    STAGED[mode] = len(staged)
    found = spark.read.parquet(str(work / "findings.parquet")).groupBy("category").agg(F.sum("count").alias("n"))
    return took, {r["category"]: int(r["n"]) for r in found.collect()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000, help="master records per database")
    ap.add_argument("--dbs", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="runs per mode, alternated")
    ap.add_argument("--healthy", action="store_true", help="a faithful slave (no gap, no replay)")
    ap.add_argument("--before", metavar="REV", help="also REV's binlog diff, with this tree's staging")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at start")
    shape = "healthy" if args.healthy else "gap-replay"
    root = Path(tempfile.gettempdir()) / f"pika-diff-bench-{args.records}-{args.dbs}-{shape}"
    if not (root / "complete").exists():
        shutil.rmtree(root, ignore_errors=True)
        started = time.perf_counter()
        generate(root, args.records, args.dbs, args.healthy)
        (root / "complete").write_text("")
        print(f"generated {args.records:,} x {args.dbs} records per side in {time.perf_counter() - started:.1f} s")

    from audit.diff.spark import get_spark
    from audit.sources.pika.logfiles import discover, scan_logs

    spark = get_spark()
    scans = []
    for side in ("m", "s"):
        path = root / f"{side}.scan.parquet"
        shutil.rmtree(path, ignore_errors=True)
        scan_logs(spark, discover(root / side, list(range(args.dbs)), side), str(path))
        scans.append(spark.read.parquet(str(path)))
    records = sum(df.where("row_kind = 'record'").count() for df in scans)
    work = Path(tempfile.mkdtemp(prefix="pika-diff-work-"))
    modes = {"files (before)": "files", "current": "current"}
    at_rev = None
    if args.before:
        at_rev = revision_module(args.before)
        modes = {f"{args.before[:12]}": "rev", **modes}
    times: dict[str, list[float]] = {name: [] for name in modes}
    cpu: dict[str, float] = {name: 0.0 for name in times}
    found: dict[str, dict[str, int]] = {}
    diff_once(spark, scans[0], scans[1], args.dbs, work, "current")  # warm-up: the JVM's first compiles
    for _ in range(args.repeat):
        for name in times:
            before = sum(tree_cpu_s())
            took, found[name] = diff_once(spark, scans[0], scans[1], args.dbs, work, modes[name], at_rev)
            cpu[name] += sum(tree_cpu_s()) - before
            times[name].append(took)
    shutil.rmtree(work, ignore_errors=True)
    print(f"\n{shape}: {records:,} records on both sides, {args.dbs} db(s); {args.repeat} runs per mode, alternated\n")
    print(f"{'mode':<16} {'best s':>8} {'median s':>9} {'records/s':>11} {'CPU s/run':>10} {'staged':>6}  findings")
    for name, runs in times.items():
        best = min(runs)
        print(
            f"{name:<16} {best:>8.2f} {statistics.median(runs):>9.2f} {records / best:>11,.0f}"
            f" {cpu[name] / args.repeat:>10.1f} {STAGED[modes[name]]:>6}  {dict(sorted(found[name].items()))}"
        )
    base, now = min(times["files (before)"]), min(times["current"])
    agree = all(f == found["current"] for f in found.values())
    print(f"\ncurrent / files: {now / base:.2f}x the time; findings agree: {agree}")
    if args.before:
        print(f"current / {args.before}: {now / min(times[args.before[:12]]):.2f}x the time")
    print(f"load average now {os.getloadavg()[0]:.1f}; peak RSS of this process {peak_rss_mb():,.0f} MB")


if __name__ == "__main__":
    main()
