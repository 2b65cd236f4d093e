"""Build the Spark driver JVM's class-data-sharing archive (what it is for: audit/diff/class_cache.py).

    python -m audit.diff.build_class_cache [--force]

A child process starts the session with `-XX:ArchiveClassesAtExit`, runs a small keyspace diff and
closes the JVM, which writes the classes it loaded at its exit; the archive then replaces the cache's
file at once. `make setup` runs this; an archive already there is kept.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from audit.diff.class_cache import QUIET, archive_path, cache_dirs, superseded


def build(path: Path, timeout_s: float = 600) -> float:
    """Build the archive at `path` in a child process; seconds taken. Raises RuntimeError on failure."""
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="replica-audit-cds-") as tmp:
        partial = Path(tmp) / "archive.jsa"
        env = {**os.environ, "REPLICA_AUDIT_CACHE_DIR": tmp}  # no older archive to map while dumping
        env.pop("REPLICA_AUDIT_SPARK_MASTER", None)  # the driver's classes are the point: a local job will do
        done = subprocess.run(
            [sys.executable, "-m", "audit.diff.build_class_cache", "--dump-to", str(partial)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if done.returncode != 0 or not partial.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise RuntimeError(f"the archive was not written (exit {done.returncode}): {' / '.join(tail)}")
        part = path.with_name(f"{path.name}.{os.getpid()}.part")  # two builds at once do not mix
        shutil.move(str(partial), part)
        os.replace(part, path)  # whole or absent: a JVM never maps a half-written file
    for stale in superseded(path):
        stale.unlink(missing_ok=True)
    return time.monotonic() - started


def _dump(target: Path) -> None:
    """Child: the session and a small keyspace diff in a JVM that writes its classes to `target` at exit."""
    from pyspark import SparkContext

    from audit.diff import spark as spark_session
    from audit.diff.keyspace import SNAPSHOT_DDL, diff_snapshots

    options = f"{spark_session.log4j_option()} -XX:ArchiveClassesAtExit={target} {QUIET}"
    spark_session.configure(conf={"spark.driver.extraJavaOptions": options})
    spark = spark_session.get_spark()
    work = target.parent
    rows = [(0, b"k%d" % i, "string", None, None, 1, f"d{i % 7}", "ok", None, 1000 + i) for i in range(200)]
    for side, keep in (("m", 200), ("r", 190)):
        spark.createDataFrame(rows[:keep], SNAPSHOT_DDL).write.mode("overwrite").parquet(str(work / side))
    diff_snapshots(spark, str(work / "m"), str(work / "r"), str(work / "c"), 2000)
    spark.read.parquet(str(work / "c")).toArrow()
    proc = SparkContext._gateway.proc  # type: ignore[union-attr]  # spark-submit, exec'd into the JVM
    spark_session.stop_spark()
    proc.stdin.close()  # the gateway exits when its stdin closes; the archive is written at that exit
    proc.wait(timeout=300)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Build the Spark driver JVM's class-data-sharing archive.")
    ap.add_argument("--force", action="store_true", help="build it again even if it exists")
    ap.add_argument("--dump-to", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.dump_to:
        _dump(args.dump_to)
        return 0
    path = archive_path()
    if path is None:
        print(
            "class-data-sharing archive: no java binary, or no folder it may write to "
            f"({', '.join(map(str, cache_dirs()))}); Spark runs start without one"
        )
        return 1
    if path.is_file() and not args.force:
        print(f"class-data-sharing archive: {path} (present)")
        return 0
    try:
        secs = build(path)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print(f"class-data-sharing archive: not built: {e}; Spark runs start without one")
        return 1
    print(f"class-data-sharing archive: {path} built in {secs:.0f} s ({path.stat().st_size / 2**20:.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
