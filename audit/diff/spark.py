"""One SparkSession per process. Local by default; any cluster by configuration alone (docs/spark.md).

Settings come from, in order: `configure()` (the CLI's --spark-master / --spark-conf), the environment
(REPLICA_AUDIT_SPARK_MASTER, REPLICA_AUDIT_SPARK_CONF="k=v;k=v"), then the defaults below. The
master is any Spark master URL (`local[*]`, `spark://host:7077`, `yarn`, `k8s://https://...`) or a
Spark Connect URL (`sc://host:15002`). Only a local master gets the local sizing (few shuffle
partitions, a 4 GiB driver, later optimising compiles); on a cluster, its own defaults and the given
settings rule. The driver JVM maps the class-data-sharing archive when one was built
(audit/diff/class_cache.py), unless the settings give their own `spark.driver.extraJavaOptions`.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from audit import defaults
from audit.diff import class_cache
from audit.errors import ConfigError
from audit.urls import redact_url

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

_lock = threading.Lock()
_session: SparkSession | None = None
_overrides: dict[str, str] = {}

COMMON_DEFAULTS = {
    # what the jobs assume wherever they run: UTC times, compact Parquet, adaptive query execution
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.compression.codec": "zstd",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
}
"""Settings for any master (each can be overridden)."""

LOCAL_DEFAULTS = {
    # A small job in 200 shuffle partitions spends its time scheduling: start small, let AQE adapt.
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.enabled": "false",
    "spark.driver.memory": "4g",
}
"""Sizing for a `local[...]` master only: on a cluster, 8 partitions and a 4 GiB driver would be wrong."""

LOCAL_JIT_OPTIONS = (
    "-XX:Tier4InvocationThreshold=50000",
    "-XX:Tier4CompileThreshold=150000",
    "-XX:Tier4BackEdgeThreshold=400000",
)
"""A local driver's JVM is also its only executor, started for one run. By default HotSpot sends a
method to C2, its optimising compiler, after about 5,000 calls, and in a 1M-key diff C2 then took a
third of the JVM's CPU on code that had nearly finished running. Ten times those thresholds: C2
compiles only what keeps running; the 1M diff took 0.4-1.3 fewer CPU seconds, the 10M one no longer.
Only the thresholds move; no compiler is turned off (C1 alone doubled the 10M diff). docs/spark.md
has the runs."""

CONNECT_SCHEME = "sc://"


def configure(master: str | None = None, conf: dict[str, str] | None = None) -> None:
    """Set session options before the first `get_spark()` call (the CLI does this, before any stage: a
    master that cannot be one is a ConfigError then, not after the snapshots)."""
    if master:
        check_master(master)
        _overrides["spark.master"] = master
    else:
        _check_env_settings()
    _overrides.update(conf or {})


def _check_env_settings() -> None:
    """REPLICA_AUDIT_SPARK_MASTER and _CONF checked as --spark-master and --spark-conf are: a mistake there
    is named up front, not met as the JVM's stack trace once the snapshots are done."""
    for item in os.environ.get("REPLICA_AUDIT_SPARK_CONF", "").split(";"):
        if item.strip() and "=" not in item:
            raise ConfigError(f"REPLICA_AUDIT_SPARK_CONF: {item.strip()!r}: expected key=value (separated by ';')")
    master = os.environ.get("REPLICA_AUDIT_SPARK_MASTER")
    if master:
        try:
            check_master(master)
        except ConfigError as e:
            raise ConfigError(f"REPLICA_AUDIT_SPARK_MASTER: {e}") from None


_MASTER_FORMS = re.compile(r"local(\[[^\]]+\])?|local-cluster\[[^\]]+\]|yarn|(spark|k8s|mesos|sc)://.+")


def check_master(master: str) -> None:
    """A master URL of a form Spark takes; a standalone master (spark://) must answer on its port."""
    if not _MASTER_FORMS.fullmatch(master):
        raise ConfigError(
            f"spark master {redact_url(master)}: not a Spark master URL (local[N], spark://host:7077, yarn, "
            "k8s://https://host:443, sc://host:15002)"
        )
    if master.startswith("spark://"):
        for address in master[len("spark://") :].split(","):  # standby masters: spark://h1:7077,h2:7077
            host, _, port = address.partition(":")
            _check_answers(master, host, int(port) if port.isdigit() else 7077, "Spark master")


def _check_answers(master: str, host: str, port: int, what: str, timeout_s: float = 5.0, hint: str = "") -> None:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as e:
        raise ConfigError(
            f"spark master {redact_url(master)}: no {what} answers at {host}:{port} ({e.strerror or e}){hint}"
        ) from None


def _env_conf() -> dict[str, str]:
    conf = {}
    for item in os.environ.get("REPLICA_AUDIT_SPARK_CONF", "").split(";"):
        if "=" in item:
            k, v = item.split("=", 1)
            conf[k.strip()] = v.strip()
    master = os.environ.get("REPLICA_AUDIT_SPARK_MASTER")
    if master:
        conf["spark.master"] = master
    return conf


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[") or master.startswith("local-cluster[")


def submitted() -> bool:
    """True in a driver that spark-submit started: it has set the master and the settings already."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def session_conf() -> dict[str, str]:
    """The session's settings: defaults for the kind of master, then the environment, then configure().

    Under spark-submit with no master given here, the master and the sizing are spark-submit's.
    """
    given = {**_env_conf(), **_overrides}
    if "spark.master" not in given and submitted():
        return {**COMMON_DEFAULTS, **given}
    return driver_conf(given.get("spark.master", defaults.SPARK_MASTER), given)


def driver_conf(master: str, given: dict[str, str]) -> dict[str, str]:
    """A driver's settings for `master`: the common defaults, a local master's sizing and JVM options, then
    `given`. Also what a Spark Connect server started by replica-audit runs with (audit/diff/connect_server.py)."""
    sizing = LOCAL_DEFAULTS if is_local(master) else {}
    conf = {"spark.master": master, **COMMON_DEFAULTS, **sizing, **given}
    if not master.startswith(CONNECT_SCHEME):
        jit = LOCAL_JIT_OPTIONS if is_local(master) else ()
        conf.setdefault("spark.driver.extraJavaOptions", " ".join([log4j_option(), *class_cache.java_options(), *jit]))
    return conf


def log4j_option() -> str:
    """The driver's log configuration (errors only), as a JVM option."""
    return f"-Dlog4j2.configurationFile=file:{Path(__file__).with_name('log4j2.properties')}"


def _builder(conf: dict[str, str]) -> object:
    from pyspark.sql import SparkSession

    master = conf.get("spark.master", "")
    builder = SparkSession.builder.appName("replica-audit")
    if master.startswith(CONNECT_SCHEME):
        try:
            import pyspark.sql.connect.session  # noqa: F401  (needs grpcio, grpcio-status, ...)
        except ImportError as e:
            raise ConfigError(
                f"spark master {redact_url(master)}: a Spark Connect URL needs the Spark Connect client "
                f"(pip install 'replica-audit[connect]', which make setup does; missing: {e.name})"
            ) from None
        _check_reachable(master)
        builder = builder.remote(master)
        # the server owns the cluster settings; a client may set only runtime SQL settings
        conf = {k: v for k, v in conf.items() if k.startswith("spark.sql.")}
    for k, v in conf.items():
        builder = builder.config(k, v)
    return builder


def _connect_address(url: str) -> tuple[str, int]:
    from urllib.parse import urlsplit

    try:
        where = urlsplit(url.split(";", 1)[0])
        return where.hostname or "localhost", where.port or 15002
    except ValueError as e:  # a port that is no number or out of range, an IPv6 address without brackets
        raise ConfigError(f"spark master {redact_url(url)}: not a Spark Connect URL ({e})") from None


def _check_reachable(url: str, timeout_s: float = 5.0) -> None:
    """A Connect server that is not there: say so now. The client would retry its first request for
    minutes before failing, and a run would seem to hang."""
    host, port = _connect_address(url)
    hint = "; start one (replica-audit spark-server) or give another --spark-master"
    _check_answers(url, host, port, "Spark Connect server", timeout_s, hint)


def get_spark() -> SparkSession:
    global _session
    with _lock:
        if _session is None:
            conf = session_conf()
            master = conf.get("spark.master", "")
            if is_local(master):
                os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "resolves to a loopback" warning
            # Python workers (binlog/commit-log parsing) must run an interpreter with pyarrow and this
            # package: this one locally; on a cluster the one spark.pyspark.python names on the executors.
            # PySpark takes the workers' interpreter from PYSPARK_PYTHON, not from that setting.
            executors_python = conf.get("spark.pyspark.python") or (sys.executable if is_local(master) else None)
            if executors_python:
                os.environ.setdefault("PYSPARK_PYTHON", executors_python)
            try:
                session: SparkSession = _builder(conf).getOrCreate()  # type: ignore[attr-defined]
            except ConfigError:
                raise
            except Exception as e:  # no Java, a cluster that refuses the application, a setting it rejects
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ConfigError(f"spark master {redact_url(master)}: the Spark session did not start: {first}") from e
            if not master.startswith(CONNECT_SCHEME):
                session.sparkContext.setLogLevel("ERROR")
            _session = session
        return _session


def warm_up() -> threading.Thread:
    """Start the session in the background: the JVM's start-up then overlaps the snapshots, which do not
    need it, instead of delaying the first diff. `get_spark()` waits for it (one lock).

    PySpark's modules are imported here, in the caller's thread, first: pyspark and pyspark.sql import
    each other, and the run's own thread imports pyspark.sql (the diff modules) while the session
    starts; two threads importing that cycle at once leave one of them a half-imported module. The
    classic DataFrame's modules too (otherwise imported by the first DataFrame): GX, imported in the
    background once the session is up (audit/background.py), imports pyspark's ML and Connect
    modules, which import them while the run's thread would be reading its first DataFrame."""
    from audit.background import in_background

    with contextlib.suppress(ImportError):  # best effort, as the warm-up is: the stage that needs it reports
        import pyspark.sql  # 0.2-0.5 s
        import pyspark.sql.classic.dataframe  # noqa: F401  (0.01 s)

    return in_background("spark-warm-up", get_spark)


def is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect client session: no SparkContext, no JVM, no broadcast variables here."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


_LOCAL_THREADS = re.compile(r"local(?:\[(\d+|\*)(?:,\d+)?\])?")  # local, local[N], local[*], each with [,F] retries


def local_threads(master: str) -> int | None:
    """The task threads of a `local`, `local[N]` or `local[*]` master, which are Spark's default parallelism
    there (1, N, this machine's cores); None for any other master, `local-cluster[...]` included."""
    m = _LOCAL_THREADS.fullmatch(master)
    if m is None:
        return None
    threads = m.group(1) or "1"
    return (os.cpu_count() or 1) if threads == "*" else int(threads)


def default_parallelism(spark: SparkSession) -> int:
    """How many tasks the session's cluster runs at once by default.

    A Spark Connect client cannot ask the SparkContext: it reads the server's `spark.default.parallelism`
    when set, else the N of a `local[N]` master, else assumes 2 (a caller that knows better has a setting)."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    given = spark.conf.get("spark.default.parallelism", None)
    if given:
        return int(given)
    # only a thread count the master names: `local[*]` is the server's cores, not this client's
    local = _LOCAL_THREADS.fullmatch(spark.conf.get("spark.master", None) or "")
    return int(local.group(1)) if local and local.group(1) not in (None, "*") else 2


def arrow_frame(spark: SparkSession, table: pa.Table) -> DataFrame:
    """A pyarrow table as a DataFrame of the same schema, empty ones included (a Spark Connect client
    cannot infer a schema from an empty table, so those are built from the schema alone)."""
    if table.num_rows:
        return spark.createDataFrame(table)
    from pyspark.sql.pandas.types import from_arrow_schema

    return spark.createDataFrame([], from_arrow_schema(table.schema))


def stop_spark() -> None:
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None
