"""The Spark driver JVM's class-data-sharing archive: a fresh JVM maps Spark's classes instead of loading them.

A run's diff starts in a fresh JVM, and on a small pair that start is most of the stage: on this
project's 2-core machine the session took 5.5 s and 9 CPU seconds to start, and the first diff of a
2k-key pair 9.5-10 s against 2.4 s for the second (docs/performance.md). Much of it is loading, parsing
and verifying Spark's classes. JDK 13+ can keep the classes an application loaded in a dynamic archive
(`-XX:ArchiveClassesAtExit` when a JVM exits) that later JVMs map (`-XX:SharedArchiveFile`): session
start 3.6 s and 5.9 CPU seconds, first diff 7.4-7.9 s.

The archive is built once, by `python -m audit.diff.build_class_cache` (`make setup` runs it): a JVM starts
the session, runs a small keyspace diff and exits. An archive belongs to one JDK and one classpath, so
its file name carries hashes of Spark's installation, the java binary and the jars; a JVM whose classpath differs (a
user's `spark.driver.extraClassPath`) does not use it and starts as before, silently. With no archive,
nothing changes. Where it is kept: :func:`cache_dirs`; `REPLICA_AUDIT_CACHE_DIR` names the folder.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

QUIET = "-Xlog:cds=off,cds+dynamic=off"
"""The JVM warns on stdout when it cannot map an archive or skips a class while dumping one; neither
changes what a run does, and the auditor's output stays readable."""


def cache_dirs() -> list[Path]:
    """Where archives are looked for, in order; a build writes to the first one it may write to.

    The Python installation's own `var/cache/replica-audit` first: an archive belongs to the Spark
    installation inside it, and goes when a venv is deleted (a clean clone per CI run would otherwise
    leave 165 MiB behind each time). The user's cache when that is not writable (a system Python).
    """
    given = os.environ.get("REPLICA_AUDIT_CACHE_DIR")
    if given:
        return [Path(given)]
    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "replica-audit"
    return [Path(sys.prefix) / "var" / "cache" / "replica-audit", user]


def _writable(folder: Path) -> bool:
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    return os.access(existing, os.W_OK)


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


def superseded(path: Path) -> list[Path]:
    """The archives beside `path` of the same Spark installation but another JDK or set of jars: what a
    new build of `path` replaces (another installation's archives stay)."""
    installation = path.name.rsplit("-", 1)[0]
    return [p for p in path.parent.glob(f"{installation}-*.jsa") if p != path]


def archive_path() -> Path | None:
    """This JDK and Spark's archive where one exists, else where a build would write it; None without
    a java binary or a writable folder."""
    java = _java()
    if java is None:
        return None
    name = archive_name(java, _spark_jars())
    folders = cache_dirs()
    found = next((d / name for d in folders if (d / name).is_file()), None)
    return found or next((d / name for d in folders if _writable(d)), None)


def java_options() -> list[str]:
    """The driver JVM's options that map the archive, or none when it has not been built."""
    path = archive_path()
    if path is None or not path.is_file():
        return []
    return [f"-XX:SharedArchiveFile={path}", QUIET]
