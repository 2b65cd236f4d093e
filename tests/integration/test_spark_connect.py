"""Every kind that uses Spark, audited through a Spark Connect server that `replica-audit spark-server` started.

The server drives local[2] on loopback. Each audit runs as its own process, `replica-audit run
--spark-master sc://...`, with no Java on its PATH and JAVA_HOME pointing nowhere: a local JVM could
not start, so what the run finds was computed on the server. Planted divergences: a Redis pair
(every category of the keyspace diff), a Pika binlog pair with a gap, a RocketMQ slave reattached to
a redeployed master, a MariaDB pair whose table is split over Spark tasks, and a Redis Cluster whose
shards are snapshotted in Spark tasks (their URLs, password included, inside the tasks' closure).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.local.mariadb_server import mariadb_available
from audit.local.mariadb_server import start_pair as start_mariadb_pair
from audit.local.mariadb_server import wait_in_sync as mariadb_in_sync
from audit.local.redis_cluster import start_cluster
from audit.local.redis_server import free_port, start_pair, wait_in_sync
from audit.local.rocketmq_commitlog import replicate, write_store
from audit.local.sample import load_sample, plant_divergences
from audit.sources.rocketmq.store import max_offset
from tests.conftest import REPO
from tests.integration.helpers import findings, latest_run, summary, write_inventory
from tests.integration.test_redis_fleet_cli import FAST, PASSWORD, cluster_pair, load, plant
from tests.pika_scenarios import commands, gap_plan, write_master, write_slave
from tests.unit.test_rmq_diff import msg

pytestmark = pytest.mark.integration
READY = "spark connect server: sc://"  # the line that says it serves (a warm-up line comes before it)


def _server_procs(port: int) -> list[int]:
    """Processes whose command line names this server's port: the JVM the command started (the command's
    own line says `--port N`, not this)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if f"spark.connect.grpc.binding.port={port}".encode() in cmd:
            found.append(int(proc.name))
    return found


def _started_server(log: Path, port: int, *args: str) -> subprocess.Popen[bytes]:
    """`replica-audit spark-server --port PORT ARGS` in the background, once it says it is ready."""
    cmd = [sys.executable, "-m", "audit", "spark-server", "--port", str(port), *args]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 150
    while READY not in log.read_text(errors="replace"):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
        time.sleep(0.3)
    return proc


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`replica-audit spark-server` in the background; its URL once it says it is ready."""
    port = free_port()
    log = tmp_path_factory.mktemp("spark-connect") / "server.log"
    proc = _started_server(log, port, "--spark-master", "local[2]", "--spark-conf", "spark.driver.memory=1g")
    url = f"sc://127.0.0.1:{port}"
    assert f"spark connect server: {url} (driving local[2])" in log.read_text()
    assert "warmed up by a keyspace diff in" in log.read_text()
    yield url
    proc.send_signal(signal.SIGTERM)  # as a service manager stops it: the JVM must go too
    assert proc.wait(timeout=60) == 0
    assert _server_procs(port) == []


def _run(server: str, inventory: Path, out: Path, expect: tuple[int, ...] = (0, 1)) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_", "REPLICA_AUDIT_SPARK"))}
    env.update(PATH=str(Path(sys.executable).parent), JAVA_HOME="/nonexistent")  # no local JVM can start
    done = subprocess.run(
        [sys.executable, "-m", "audit", "run", "-i", str(inventory), "-o", str(out), "--spark-master", server],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode in expect, done.stderr[-4000:]
    return done.returncode


def _by_pair(root: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for f in findings(root):
        out.setdefault(f["pair"], []).append(f)
    return out


def _pika_gap(root: Path) -> dict[str, Any]:
    n = 1500
    m = write_master(root / "m", 0, commands(n, 0), 64 * 1024)
    write_slave(root / "s", 0, m, gap_plan(n, 700, 5), 64 * 1024)
    binlog = {"master_dir": str(root / "m"), "replica_dir": str(root / "s"), "file_size": 64 * 1024}
    return {"name": "pika-gap", "kind": "pika", "dbs": [0], "binlog": binlog}


def _rocketmq_stale_slave(root: Path) -> dict[str, Any]:
    old = [msg(i, host="10.0.0.1:10911", t0=1_600_000_000_000, tag="old") for i in range(300)]
    write_store(root / "old", old, file_size=16 * 1024)
    replicate(root / "old", root / "s", start=0, upto=max_offset(root / "old") or 0)
    new = [msg(i, host="10.0.0.2:10911", t0=1_700_000_000_000, tag="new") for i in range(120)]
    write_store(root / "m", new, file_size=16 * 1024)
    return {
        "name": "mq",
        "kind": "rocketmq",
        "master": {"store_dir": str(root / "m")},
        "replica": {"store_dir": str(root / "s")},
    }


@pytest.mark.slow
def test_redis_pika_and_rocketmq_pairs_audited_on_the_server(server: str, tmp_path: Path) -> None:
    master, replica = start_pair(tmp_path / "redis")
    try:
        load_sample(master.client(), n_keys=3000, big_hash_fields=3000)
        wait_in_sync(master, replica)
        planted = plant_divergences(replica.client())
        pairs = [
            {"name": "cache", "kind": "redis", "master": master.url, "replica": replica.url},
            _pika_gap(tmp_path / "pika"),
            _rocketmq_stale_slave(tmp_path / "mq"),
        ]
        inventory = write_inventory(tmp_path / "inv.yaml", pairs)
        assert _run(server, inventory, tmp_path / "out") == 1
    finally:
        replica.stop()
        master.stop()
    root = latest_run(tmp_path / "out")
    got = _by_pair(root)
    keyspace = {(f["key"], f["category"]) for f in got["cache"] if f["check"] == "keyspace"}
    assert keyspace == {(p.key, p.category) for p in planted}
    (gap,) = [f for f in got["pika-gap"] if f["category"] == "missing_range"]
    assert gap["count"] == 5
    mq = {f["category"]: f for f in got["mq"]}
    assert {"stale_replica_data", "replica_ahead"} <= set(mq) and mq["replica_ahead"]["diagnosis"] == "RMQ_STALE_SLAVE"
    statuses = {p["pair"]: p["status"] for p in summary(root)["pairs"]}
    assert statuses == {"cache": "failed", "pika-gap": "failed", "mq": "failed"}


@pytest.mark.slow
def test_cluster_shards_snapshotted_in_tasks_on_the_server(server: str, tmp_path: Path) -> None:
    cluster = start_cluster(tmp_path / "cluster", password=PASSWORD)
    try:
        keys = load(cluster, "s", 300)
        plant(cluster, keys[1], "SET", keys[1], "changed")
        plant(cluster, keys[2], "DEL", keys[2])
        inventory = write_inventory(tmp_path / "inv.yaml", [cluster_pair(cluster, fleet_snapshot="spark")], **FAST)
        assert _run(server, inventory, tmp_path / "out") == 1
    finally:
        cluster.stop()
    root = latest_run(tmp_path / "out")
    got = {(f["key"], f["category"]) for f in findings(root) if f["check"] == "keyspace"}
    assert got == {(keys[1], "value_mismatch"), (keys[2], "extra_on_replica")}
    (s,) = summary(root)["pairs"]
    assert s["coverage"]["shards"] == 3
    assert PASSWORD not in (root / "summary.json").read_text() + (root / "work/sessions/state.json").read_text()


@pytest.mark.slow
@pytest.mark.skipif(not mariadb_available(), reason="mariadbd not installed (apt-get install mariadb-server)")
def test_mysql_rows_split_over_tasks_on_the_server(server: str, tmp_path: Path) -> None:
    master, replica = start_mariadb_pair(tmp_path / "mariadb")
    try:
        master.execute(
            "CREATE DATABASE shop",
            "CREATE TABLE shop.orders (id INT PRIMARY KEY, sku VARCHAR(20), total DECIMAL(10,2))",
            "INSERT INTO shop.orders SELECT seq, CONCAT('A-', seq), seq * 1.25 FROM shop.seq_1_to_3000",
        )
        mariadb_in_sync(master, replica)
        replica.execute(
            "SET SESSION sql_log_bin = 0", "DELETE FROM shop.orders WHERE id = 7", "SET SESSION sql_log_bin = 1"
        )
        settings = {"min_segment_rows": 500, "parallelism": 3, "min_chunk_rows": 50, "max_chunk_rows": 400}
        pair = {
            "name": "shop-db",
            "kind": "mysql",
            "master": master.create_auditor(),
            "replica": replica.create_auditor(),
            "tables": ["shop.*"],
            "settings": {**settings, "recheck_interval_s": 0.05, "gtid_wait_s": 5},
        }
        inventory = write_inventory(tmp_path / "inv.yaml", [pair])
        assert _run(server, inventory, tmp_path / "out") == 1
    finally:
        replica.stop()
        master.stop()
    root = latest_run(tmp_path / "out")
    assert {(f["category"], f["key"]) for f in findings(root)} == {("missing_row", b"[7]")}
    (s,) = summary(root)["pairs"]
    assert s["coverage"]["rows_compared"] == 3000


def _spark_server(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "audit", "spark-server", *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "0"], "--host 127.0.0.1 --port 0: expected an address and a port"),
        (["--spark-master", "sc://elsewhere:15002"], "the server drives a master; it cannot be a Connect URL"),
    ],
)
def test_spark_server_refuses_bad_options(args: list[str], message: str) -> None:
    done = _spark_server(*args)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_spark_server_on_a_taken_port_says_so(server: str) -> None:
    host, port = server.removeprefix("sc://").split(":")
    done = _spark_server("--port", port)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"spark connect server on {host}:{port}: cannot listen there: Address already in use" in done.stderr
    assert "Traceback" not in done.stderr


def test_spark_server_whose_jvm_dies_exits_3(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "server.log"
    args = ("--no-warm-up", "--spark-master", "local[1]", "--spark-conf", "spark.driver.memory=512m")
    proc = _started_server(log, port, *args)
    assert "warmed up" not in log.read_text()
    (jvm,) = [pid for pid in _server_procs(port) if pid != proc.pid]
    os.kill(jvm, signal.SIGKILL)
    assert proc.wait(timeout=60) == 3
    assert f"spark connect server on 127.0.0.1:{port} stopped on its own (code" in log.read_text()


def test_a_connect_url_with_no_server_behind_it_is_a_clear_error(tmp_path: Path) -> None:
    port = free_port()
    pair = _rocketmq_stale_slave(tmp_path / "mq")
    inventory = write_inventory(tmp_path / "inv.yaml", [pair])
    started = time.monotonic()
    url = f"sc://127.0.0.1:{port}/;user_id=auditor;token=s3cret-token"
    assert _run(url, inventory, tmp_path / "out", expect=(2,)) == 2
    assert time.monotonic() - started < 60  # not the client's minutes of retries
    root = latest_run(tmp_path / "out")
    (s,) = summary(root)["pairs"]
    assert s["error"]["message"].startswith(f"spark master sc://127.0.0.1:{port}: no Spark Connect server answers")
    written = "".join(p.read_text(errors="replace") for p in root.rglob("*") if p.suffix in (".json", ".html"))
    assert "s3cret-token" not in written + s["error"]["message"]


CLIENT = """
import json, sys
from pyspark.sql import functions as F
from audit.diff.spark import configure, default_parallelism, get_spark, is_connect
from audit.diff.task_frame import one_row_per_task

configure(sys.argv[1])
spark = get_spark()
frame = one_row_per_task(spark, [("i", "int"), ("dbs", "array<int>")], [(i, (i, i + 1)) for i in range(8)])
placed = sorted((r["p"], r["i"], r["dbs"]) for r in frame.withColumn("p", F.spark_partition_id()).collect())
print(json.dumps({"connect": is_connect(spark), "parallelism": default_parallelism(spark), "placed": placed}))
"""


def test_a_connect_client_gets_one_row_per_task_and_the_server_s_parallelism(server: str) -> None:
    done = subprocess.run([sys.executable, "-c", CLIENT, server], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["connect"] is True
    assert got["parallelism"] == 2  # the server drives local[2]: spark-server sets it for its clients
    assert got["placed"] == [[i, i, [i, i + 1]] for i in range(8)]
