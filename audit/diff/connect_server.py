"""A Spark Connect server started from the Spark inside the pyspark package: `replica-audit spark-server`.

Each `replica-audit` process that diffs starts a driver JVM, and on a small or medium keyspace that
JVM's start and its first compiles are most of the diff (docs/performance.md). A Connect server is a
driver that stays up: runs given `--spark-master sc://HOST:PORT` (or REPLICA_AUDIT_SPARK_MASTER) send
their plans to it, and from the second run on they find its code compiled. Scheduled audits (one
process per Airflow task) gain the most.

The server runs :func:`audit.diff.spark.driver_conf` for its master, so a local server gets the same
sizing, class-data-sharing archive and compiler thresholds as a local session, and its Python workers
run this interpreter, which has replica-audit (:func:`server_env`). A Connect server has no
authentication of its own: it listens on loopback unless told otherwise; anything else belongs behind
a network boundary the operator controls.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from audit.diff.spark import driver_conf, is_local, local_threads

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = 15002  # Spark Connect's own default
STARTUP_S = 120.0
WARM_UP_ROWS = 300_000


def spark_home() -> Path:
    """The Spark installation inside the pyspark package (bin/spark-submit, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def server_command(host: str, port: int, master: str, given: Mapping[str, str]) -> list[str]:
    """spark-submit's command line for a Connect server on host:port driving `master`."""
    conf = {
        **_local_parallelism(master),
        **driver_conf(master, dict(given)),
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
    }
    cmd = [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--name", "replica-audit connect"]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, "spark-internal"]


def _local_parallelism(master: str) -> dict[str, str]:
    """A local master's cores as `spark.default.parallelism` (what local mode uses anyway), so that
    Connect clients, which cannot ask the SparkContext, read it (audit/diff/spark.py default_parallelism)."""
    threads = local_threads(master)
    return {} if threads is None else {"spark.default.parallelism": str(threads)}


def server_env(master: str, conf: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment. Its Python workers run PYSPARK_PYTHON: this interpreter for a local
    master, else the `spark.pyspark.python` given (a path on the executors), else what the environment
    has. Only a local master's driver is pinned to loopback: a cluster's executors must reach it."""
    env = dict(os.environ if base is None else base)
    env["SPARK_HOME"] = str(spark_home())
    if is_local(master):
        env["PYSPARK_PYTHON"] = sys.executable
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    elif conf.get("spark.pyspark.python"):
        env["PYSPARK_PYTHON"] = conf["spark.pyspark.python"]
    return env


def connect_url(host: str, port: int) -> str:
    return f"sc://[{host}]:{port}" if ":" in host else f"sc://{host}:{port}"


@dataclass
class ConnectServer:
    """One server process (in a new process group, which :meth:`stop` ends)."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    master: str = "local[*]"
    conf: Mapping[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return connect_url(self.host, self.port)

    def start(self, log: IO[bytes] | None = None) -> ConnectServer:
        """Start the server (its output to `log`, else inherited) and wait until it accepts connections.

        RuntimeError when the port is taken (checked first: the wait for the port would otherwise take
        another listener for this server) or when the server ends before it listens."""
        self._check_port_free()
        self.proc = subprocess.Popen(
            server_command(self.host, self.port, self.master, self.conf),
            env=server_env(self.master, self.conf),
            stdout=log,
            stderr=subprocess.STDOUT if log is not None else None,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _check_port_free(self) -> None:
        try:
            family, kind, proto, _, address = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)[0]
        except socket.gaierror as e:
            raise RuntimeError(f"cannot listen there: {e.strerror or e}") from None
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as e:
                raise RuntimeError(f"cannot listen there: {e.strerror or e}") from None

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited with code {self.proc.returncode}")
            try:
                with socket.create_connection((self.host, self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"the Spark Connect server did not listen on {self.host}:{self.port} within {STARTUP_S} s")

    def wait(self) -> int:
        assert self.proc is not None
        return self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def warm_up(url: str, work: Path, rows: int = WARM_UP_ROWS, passes: int = 2) -> float:
    """Keyspace diffs of two generated snapshots through the server at `url`, so that its JVM has loaded
    and compiled the diff's code before a run needs it. Seconds taken.

    The snapshots are written here, so the server's tasks must see this filesystem: a local master's do.
    Call it from a process that needs no other Spark session: it stays configured for `url`. Its children
    start as before (pyspark's marks of a Connect client are taken off the environment)."""
    from audit.diff import spark as session
    from audit.diff.keyspace import diff_snapshots

    started = time.monotonic()
    master, replica = _write_snapshots(work, rows)
    environ = dict(os.environ)
    session.configure(url)
    spark = session.get_spark()
    try:
        for n in range(passes):
            diff_snapshots(spark, master, replica, str(work / f"candidates-{n}"), 1000)
    finally:
        session.stop_spark()  # released now: at exit, a client would try to release it on a server already gone
        # pyspark marks the process as a Connect client (SPARK_CONNECT_MODE_ENABLED), and its children too
        for name in set(os.environ) - set(environ):
            del os.environ[name]
    return time.monotonic() - started


def _write_snapshots(work: Path, rows: int) -> tuple[str, str]:
    """Two snapshots (the columns of audit/diff/keyspace.py SNAPSHOT_DDL) of `rows` string keys, 1% of
    them missing on the replica so that the candidates' pass runs too; their paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = pa.array(range(rows), pa.int64())
    digest = pa.array([f"{i * 2654435761 % 2**64:032x}" for i in range(rows)])
    keys = pa.array([b"warm:%d" % i for i in range(rows)], pa.binary())
    paths = []
    for side, keep in (("master", rows), ("replica", rows - rows // 100)):
        columns = {
            "db": pa.array([0] * keep, pa.int32()),
            "key": keys[:keep],
            "type": pa.array(["string"] * keep),
            "ttl_ms": pa.nulls(keep, pa.int64()),
            "expire_at_ms": pa.nulls(keep, pa.int64()),
            "length": n[:keep],
            "digest": digest[:keep],
            "status": pa.array(["ok"] * keep),
            "error": pa.nulls(keep, pa.string()),
            "read_at_ms": n[:keep],
        }
        (work / side).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(columns), work / side / "part-0.parquet")
        paths.append(str(work / side))
    return paths[0], paths[1]


def warms_up(master: str) -> bool:
    """Whether :func:`warm_up` can run for a server driving `master`: its tasks must see this machine's files."""
    return is_local(master)
