"""The Spark driver JVM's class-data-sharing archive: a fresh JVM maps Spark's classes instead of loading them.

A run's diff starts in a fresh JVM, and on a small pair that start is most of the stage: on this
project's 2-core machine the session took 5.5 s and 9 CPU seconds to start, and the first diff of a
2k-key pair 9.5-10 s against 2.4 s for the second (docs/performance.md). Much of it is loading, parsing
and verifying Spark's classes. JDK 13+ can keep the classes an application loaded in a dynamic archive
(`-XX:ArchiveClassesAtExit` when a JVM exits) that later JVMs map (`-XX:SharedArchiveFile`): session
start 3.6 s and 5.9 CPU seconds, first diff 7.4-7.9 s.

The archive is built once, by `python -m audit.diff.class_cache` (`make setup` runs it): a JVM starts
the session, runs a small keyspace diff and exits. An archive belongs to one JDK and one classpath, so
its file name carries hashes of Spark's installation, the java binary and the jars; a JVM whose classpath differs (a
user's `spark.driver.extraClassPath`) does not use it and starts as before, silently. With no archive,
nothing changes. `REPLICA_AUDIT_CACHE_DIR` moves it (default: `$XDG_CACHE_HOME/replica-audit`, or
`~/.cache/replica-audit`).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUIET = "-Xlog:cds=off,cds+dynamic=off"
"""The JVM warns on stdout when it cannot map an archive or skips a class while dumping one; neither
changes what a run does, and the auditor's output stays readable."""


def cache_dir() -> Path:
    given = os.environ.get("REPLICA_AUDIT_CACHE_DIR")
    if given:
        return Path(given)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "replica-audit"


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else None
    if found is None or not found.exists():
        which = shutil.which("java")
        found = Path(which) if which else None
    return found.resolve() if found else None


def _spark_jars() -> Path:
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home) / "jars"
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def archive_name(java: Path, jars: Path) -> str:
    """`spark-driver-<installation>-<contents>.jsa`: the Spark installation (its jars folder: the archive
    records the classpath's paths) and what the archive holds (the java binary's path, size and time,
    and the jars' names)."""
    installation = hashlib.sha256(str(jars).encode()).hexdigest()[:8]
    h = hashlib.sha256()
    st = java.stat()
    h.update(f"{java}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    for jar in sorted(p.name for p in jars.glob("*.jar")):
        h.update(jar.encode() + b"\0")
    return f"spark-driver-{installation}-{h.hexdigest()[:12]}.jsa"


def archive_path() -> Path | None:
    """Where this JDK and Spark's archive is (or would be); None without a java binary."""
    java = _java()
    if java is None:
        return None
    return cache_dir() / archive_name(java, _spark_jars())


def java_options() -> list[str]:
    """The driver JVM's options that map the archive, or none when it has not been built."""
    path = archive_path()
    if path is None or not path.is_file():
        return []
    return [f"-XX:SharedArchiveFile={path}", QUIET]


def build(path: Path, timeout_s: float = 600) -> float:
    """Build the archive at `path` in a child process; seconds taken. Raises RuntimeError on failure."""
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="replica-audit-cds-") as tmp:
        partial = Path(tmp) / "archive.jsa"
        env = {**os.environ, "REPLICA_AUDIT_CACHE_DIR": tmp}  # no older archive to map while dumping
        done = subprocess.run(
            [sys.executable, "-m", "audit.diff.class_cache", "--dump-to", str(partial)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if done.returncode != 0 or not partial.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise RuntimeError(f"the archive was not written (exit {done.returncode}): {' / '.join(tail)}")
        shutil.move(str(partial), path.with_suffix(".part"))
        os.replace(path.with_suffix(".part"), path)  # whole or absent: a JVM never maps a half-written file
    installation = path.name.rsplit("-", 1)[0]
    for stale in path.parent.glob(f"{installation}-*.jsa"):  # this installation's older JDK or Spark
        if stale != path:
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
        print("class-data-sharing archive: no java binary found; Spark runs start without one")
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
