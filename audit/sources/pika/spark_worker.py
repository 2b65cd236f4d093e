"""A PySpark worker daemon that imports the binlog scan's modules once, before it forks workers.

PySpark's daemon forks a Python worker for each concurrent task, and every fresh worker imports
pyarrow, numpy, xxhash and the parser on its first task: 0.67 CPU seconds each, measured beside a 64 MiB
file's 0.5 s scan (bench/pika_binlog_bench.py). With Spark setting
``spark.python.daemon.module=audit.sources.pika.spark_worker`` the daemon imports them once and the
forked workers share them. Only imports happen here (no thread pool is started before the fork).
"""

from __future__ import annotations

import numpy  # noqa: F401
import pyarrow
import pyarrow.compute
import pyarrow.fs
import pyarrow.parquet  # noqa: F401
import xxhash  # noqa: F401
from pyspark.daemon import manager

import audit.sources.pika.binlog
import audit.sources.pika.logfiles  # noqa: F401

DAEMON_CONF = {"spark.python.daemon.module": "audit.sources.pika.spark_worker"}
"""The Spark setting that selects this daemon (only takes effect before the session starts)."""

if __name__ == "__main__":
    manager()  # type: ignore[no-untyped-call]
