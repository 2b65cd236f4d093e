"""The Spark stages on a real standalone cluster: a Master and a Worker on loopback, executors in their own JVMs.

The job runs in a subprocess (one SparkSession per process; this test process may already hold a
local one): a keyspace diff of two small snapshots and a Pika binlog scan, against
`spark://127.0.0.1:PORT`. The subprocess reports what the executors saw (their JVM's command line)
and the session's settings, so the test checks that the work left the driver and that the local
sizing was not applied to a cluster.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from audit.local.spark_cluster import StandaloneCluster
from audit.sources.redis.snapshot import SNAPSHOT_SCHEMA
from tests.conftest import REPO

pytestmark = pytest.mark.integration

JOB = r"""
import json, os, sys
from pathlib import Path

from audit.diff.keyspace import diff_snapshots
from audit.diff.spark import configure, get_spark
from audit.sources.pika.logfiles import discover, scan_logs

master, work = sys.argv[1], Path(sys.argv[2])
configure(master, {
    "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.memory": "512m", "spark.executor.memory": "512m", "spark.executor.cores": "1",
    "spark.cores.max": "2", "spark.pyspark.python": sys.executable,
})
spark = get_spark()


def executor_jvm(_):
    # walk up from the Python worker to the JVM that started it
    pid = os.getpid()
    while pid > 1:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        if "java" in cmd.split(" ")[0]:
            return [pid, "CoarseGrainedExecutorBackend" in cmd]
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return [None, False]


coverage = diff_snapshots(spark, str(work / "m"), str(work / "r"), str(work / "candidates"), 2000)
candidates = sorted((r["key"].decode(), r["category"]) for r in spark.read.parquet(str(work / "candidates")).collect())
logs = discover(work / "pika" / "m", [0, 1], "master")
scan = scan_logs(spark, logs, str(work / "scan"))
jvms = spark.sparkContext.parallelize(range(4), 4).map(executor_jvm).collect()
conf = spark.sparkContext.getConf()
print(json.dumps({
    "coverage": coverage, "candidates": candidates, "scan": scan, "executor_jvms": jvms,
    "driver_jvm": spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid(),
    "app_id": spark.sparkContext.applicationId,
    "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
    "driver_memory": conf.get("spark.driver.memory"),
}))
spark.stop()
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    c = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone")).start()
    try:
        yield c
    finally:
        c.stop()


def _snapshot(path: Path, keys: dict[str, str]) -> None:
    path.mkdir(parents=True)
    rows = [
        {
            "db": 0,
            "key": k.encode(),
            "type": "string",
            "ttl_ms": None,
            "expire_at_ms": None,
            "length": len(v),
            "digest": v,
            "status": "ok",
            "error": None,
            "read_at_ms": 1_700_000_000_000,
        }
        for k, v in keys.items()
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=SNAPSHOT_SCHEMA), path / "keys.parquet")


def _pika_logs(root: Path) -> int:
    """Healthy master binlogs for db 0 and 1 over several files; returns how many records they hold."""
    from audit.sources.pika.binlog import parse_file
    from tests.pika_scenarios import commands, write_master

    records = 0
    for db in (0, 1):
        write_master(root / "m", db, commands(400, db), 16 * 1024)
        for f in sorted((root / "m" / f"log_db{db}").glob("write2file*")):
            rb = parse_file(str(f), db=db, filenum=int(f.name[len("write2file") :]), logical_end=None)
            records += rb.num_rows
    return records


def test_keyspace_diff_and_binlog_scan_on_a_standalone_cluster(cluster: StandaloneCluster, tmp_path: Path) -> None:
    master_keys = {f"k{i}": f"d{i}" for i in range(200)}
    replica_keys = {k: v for k, v in master_keys.items() if k != "k7"} | {"k8": "changed", "only:replica": "x"}
    _snapshot(tmp_path / "m", master_keys)
    _snapshot(tmp_path / "r", replica_keys)
    records = _pika_logs(tmp_path / "pika")
    done = subprocess.run(
        [sys.executable, "-c", JOB, cluster.master_url, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-4000:] + cluster.log_tail("worker")
    out = json.loads(done.stdout.strip().splitlines()[-1])

    assert out["candidates"] == [
        ["k7", "missing_on_replica"],
        ["k8", "value_mismatch"],
        ["only:replica", "extra_on_replica"],
    ]
    assert out["coverage"]["keys_compared"] == 199
    assert out["scan"]["files"] > 2 and out["scan"]["rows"] == records
    assert len(list((tmp_path / "scan").glob("part-db*.parquet"))) == out["scan"]["files"]
    # the work ran in executor JVMs, not in the driver's
    executor_pids = {pid for pid, is_executor in out["executor_jvms"] if is_executor}
    assert executor_pids and all(is_executor for _, is_executor in out["executor_jvms"]), out["executor_jvms"]
    assert out["driver_jvm"] not in executor_pids
    # a cluster master gets no local sizing
    assert out["shuffle_partitions"] == "200" and out["driver_memory"] == "512m"
    apps = cluster.status()["completedapps"] + cluster.status()["activeapps"]
    assert out["app_id"] in {a["id"] for a in apps}
