"""Redis fleets through the real DAGs (`airflow dags test`): a cluster's replication audit in
consistency_audit, and a standalone -> cluster migration in post_migration_verification, on one real
3+3 Redis Cluster."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.local.redis_cluster import LocalCluster, start_cluster
from audit.local.redis_server import RedisServer, free_port
from tests.dags.test_dags import dags_test
from tests.integration.helpers import findings, latest_run, summary, write_inventory

pytestmark = pytest.mark.airflow

UNREPLICATED = "redis.set_repl(redis.REPL_NONE); return redis.call(unpack(ARGV))"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = start_cluster(Path(tmp_path_factory.mktemp("dag-cluster")))
    yield c
    c.stop()


def test_consistency_audit_of_a_cluster_names_the_shard(
    airflow_env: dict[str, str], cluster: LocalCluster, tmp_path: Path
) -> None:
    cc = cluster.cluster_client()
    for i in range(500):
        cc.set(f"k:{i}", i)
    cluster.wait_all_in_sync()
    shard = cluster.masters[1]
    key = next(f"k:{i}" for i in range(500) if cc.get_node_from_key(f"k:{i}").port == shard.port)
    cluster.node(shard).eval(UNREPLICATED, 0, "SET", key, "diverged")
    pair = {"name": "sessions", "kind": "redis", "master": {"url": cluster.url(), "topology": "cluster"}}
    inv = write_inventory(tmp_path / "inv.yaml", [pair], recheck_interval_s=0.2, fleet_snapshot="threads")
    try:
        done = dags_test(airflow_env, "consistency_audit", {"inventory": str(inv), "out": str(tmp_path / "out")})
    finally:
        cc.set(key, "x")
    assert done.returncode != 0, (done.stdout + done.stderr)[-3000:]  # the gate failed
    root = latest_run(tmp_path / "out")
    (row,) = findings(root)
    assert (row["key"], row["category"]) == (key.encode(), "value_mismatch")
    assert json.loads(row["detail"])["shard"] == f"127.0.0.1:{shard.port}"
    assert summary(root)["pairs"][0]["artifacts"] == {"repair plan": "repair/sessions.txt"}


def test_verification_dag_certifies_a_move_into_the_cluster(
    airflow_env: dict[str, str], cluster: LocalCluster, tmp_path: Path
) -> None:
    source = RedisServer(free_port(), tmp_path / "source").start()
    try:
        for m in cluster.masters:
            cluster.node(m).flushall()
        src, dst = source.client(), cluster.cluster_client()
        for i in range(400):
            src.set(f"user:{i}", i)
            dst.set(f"user:{i}", i)
            src.set(f"tmp:{i}", i)  # filtered out: never copied
        conf = {
            "source": source.url,
            "target": json.dumps({"url": cluster.url(), "topology": "cluster"}),
            "out": str(tmp_path / "out"),
            "settings": {"recheck_interval_s": 0.2, "fleet_snapshot": "threads"},
            "options": {"compare": "length", "keys": {"include": ["user:*"]}},
        }
        done = dags_test(airflow_env, "post_migration_verification", conf)
    finally:
        source.stop()
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    (root,) = [p.parent for p in (tmp_path / "out").glob("*/certificate.json")]
    cert = json.loads((root / "certificate.json").read_text())
    assert cert["verdict"] == "passed" and cert["source"]["compare"] == "length"
    assert cert["compared"]["keys_compared"] == 400 and cert["compared"]["source_keys_filtered_out"] == 400
