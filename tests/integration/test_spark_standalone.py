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
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from audit.diff.connect_server import spark_home
from audit.local.spark_cluster import StandaloneCluster
from audit.sources.redis.snapshot import SNAPSHOT_SCHEMA
from tests.conftest import REPO

pytestmark = pytest.mark.integration

SETTINGS = [
    "spark.driver.host=127.0.0.1",
    "spark.driver.bindAddress=127.0.0.1",
    "spark.driver.memory=512m",
    "spark.executor.memory=512m",
    "spark.executor.cores=1",
    "spark.cores.max=2",
    f"spark.pyspark.python={sys.executable}",
]
JOB = (
    f"SETTINGS = {SETTINGS!r}\n"
    + r"""
import json, os, sys
from pathlib import Path
from typing import Any

from audit.diff.keyspace import diff_snapshots
from audit.diff.spark import configure, get_spark
from audit.sources.pika.logfiles import discover, scan_logs

work, master = Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None
if master:  # as the CLI does; without it, spark-submit has set the master and the settings
    configure(master, dict(arg.split("=", 1) for arg in SETTINGS))
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
    "master": spark.sparkContext.master,
    "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
    "driver_memory": conf.get("spark.driver.memory"),
}))
spark.stop()
"""
)


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


@pytest.fixture()
def inputs(tmp_path: Path) -> tuple[Path, int]:
    """Two snapshots (a key missing, one changed, one extra) and healthy Pika binlogs; their record count."""
    master_keys = {f"k{i}": f"d{i}" for i in range(200)}
    replica_keys = {k: v for k, v in master_keys.items() if k != "k7"} | {"k8": "changed", "only:replica": "x"}
    _snapshot(tmp_path / "m", master_keys)
    _snapshot(tmp_path / "r", replica_keys)
    return tmp_path, _pika_logs(tmp_path / "pika")


def _check(out: dict[str, Any], cluster: StandaloneCluster, work: Path, records: int) -> None:
    assert out["master"] == cluster.master_url
    assert out["candidates"] == [
        ["k7", "missing_on_replica"],
        ["k8", "value_mismatch"],
        ["only:replica", "extra_on_replica"],
    ]
    assert out["coverage"]["keys_compared"] == 199
    assert out["scan"]["files"] > 2 and out["scan"]["rows"] == records
    assert len(list((work / "scan").glob("part-db*.parquet"))) == out["scan"]["files"]
    # the work ran in executor JVMs, not in the driver's
    executor_pids = {pid for pid, is_executor in out["executor_jvms"] if is_executor}
    assert executor_pids and all(is_executor for _, is_executor in out["executor_jvms"]), out["executor_jvms"]
    assert out["driver_jvm"] not in executor_pids
    # a cluster master gets no local sizing
    assert out["shuffle_partitions"] == "200" and out["driver_memory"] == "512m"
    status = cluster.status()
    assert out["app_id"] in {a["id"] for a in status["completedapps"] + status["activeapps"]}


def _run(cmd: list[str], cluster: StandaloneCluster) -> dict[str, Any]:
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=600, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-4000:] + cluster.log_tail("worker")
    loaded: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.slow
def test_spark_stages_on_a_standalone_cluster(cluster: StandaloneCluster, inputs: tuple[Path, int]) -> None:
    """The master given as the CLI gives it (`configure`, i.e. --spark-master / REPLICA_AUDIT_SPARK_MASTER)."""
    work, records = inputs
    out = _run([sys.executable, "-c", JOB, str(work), cluster.master_url], cluster)
    _check(out, cluster, work, records)


@pytest.mark.slow
def test_spark_submit_to_a_standalone_cluster(cluster: StandaloneCluster, inputs: tuple[Path, int]) -> None:
    """Launched by spark-submit: get_spark() takes its master and settings and adds no local sizing."""
    work, records = inputs
    job = work / "job.py"
    job.write_text(JOB)
    submit = [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.master_url]
    for setting in SETTINGS:
        submit += ["--conf", setting]
    env_python = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    out = _run(["env", *(f"{k}={v}" for k, v in env_python.items()), *submit, str(job), str(work)], cluster)
    _check(out, cluster, work, records)
