"""One SparkSession per process. Local by default; any cluster by configuration alone.

Settings come from, in order: `configure()` (the CLI's --spark-master / --spark-conf), the environment
(REPLICA_AUDIT_SPARK_MASTER, REPLICA_AUDIT_SPARK_CONF="k=v;k=v"), then the defaults below. Snapshot
paths are plain URIs, so `s3a://` or `hdfs://` output directories work on a cluster unchanged.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from audit import defaults

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_lock = threading.Lock()
_session: SparkSession | None = None
_overrides: dict[str, str] = {}

LOCAL_DEFAULTS = {
    # A small job in 200 shuffle partitions spends its time scheduling: start small, let AQE adapt.
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "4g",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.compression.codec": "zstd",
}


def configure(master: str | None = None, conf: dict[str, str] | None = None) -> None:
    """Set session options before the first `get_spark()` call (the CLI does this)."""
    if master:
        _overrides["spark.master"] = master
    _overrides.update(conf or {})


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


def get_spark() -> SparkSession:
    global _session
    with _lock:
        if _session is None:
            from pyspark.sql import SparkSession

            conf = {"spark.master": defaults.SPARK_MASTER, **LOCAL_DEFAULTS, **_env_conf(), **_overrides}
            if conf["spark.master"].startswith("local"):
                os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "resolves to a loopback" warning
                # Python workers (binlog/commit-log parsing) must run this interpreter, which has pyarrow
                # and this package; on a cluster, PYSPARK_PYTHON names the executors' interpreter.
                os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            log4j = Path(__file__).with_name("log4j2.properties")
            conf.setdefault("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
            builder = SparkSession.builder.appName("replica-audit")
            for k, v in conf.items():
                builder = builder.config(k, v)
            _session = builder.getOrCreate()
            _session.sparkContext.setLogLevel("ERROR")
        return _session


def stop_spark() -> None:
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None
