"""Migrations between topologies on real servers: a standalone into a cluster (keys compared by
(db, key) whichever node holds them, a key filter, compare modes, field-level differences), and a
repair plan that redis-cli itself can apply between two standalones."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.diff.compare_modes import apply_mode
from audit.diff.keyspace import diff_snapshots
from audit.local.redis_cluster import LocalCluster, start_cluster
from audit.local.redis_server import RedisServer, free_port
from audit.sources.redis.display import unquote
from audit.sources.redis.endpoints import parse_endpoint
from audit.sources.redis.fields import field_diff
from audit.sources.redis.fleet_snapshot import side_tasks, snapshot_fleet
from audit.sources.redis.keyfilter import KeyFilter
from audit.sources.redis.recheck import recheck
from audit.sources.redis.repair import parse_line, write_plan
from audit.sources.redis.resp import RespPipe
from audit.sources.redis.routing import ClusterKeyReader
from audit.sources.redis.snapshot import SnapshotOptions
from audit.sources.redis.topology import Topology, discover

pytestmark = pytest.mark.integration

OPTIONS = SnapshotOptions(qps=1_000_000)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = start_cluster(Path(tmp_path_factory.mktemp("target")), replicas_per_master=0)
    yield c
    c.stop()


@pytest.fixture()
def standalone(tmp_path: Path) -> Iterator[RedisServer]:
    s = RedisServer(free_port(), tmp_path / "old").start()
    yield s
    s.stop()


def _fill(write: Any) -> None:
    for i in range(600):
        write("set", f"user:{i}", f"u{i}")
    for i in range(200):
        write("hset", f"cart:{i}", "item", "apple", "qty", str(i))
    for i in range(100):
        write("set", f"tmp:{i}", "t")


def _diff(spark: Any, out: Path) -> Any:
    coverage = diff_snapshots(
        spark, str(out / "master/keys.parquet"), str(out / "replica/keys.parquet"), str(out / "c"), 2000
    )
    return coverage, spark.read.parquet(str(out / "c"))


def test_standalone_into_cluster(spark: Any, standalone: RedisServer, target: LocalCluster, tmp_path: Path) -> None:
    old, new = standalone.client(), target.cluster_client()
    new.flushall()
    _fill(lambda *a: old.execute_command(*a))
    _fill(lambda *a: new.execute_command(*a))
    standalone.client(db=1).set("user:db1", "not compared: the pair names db 0 only")
    new.delete("user:7")
    new.set("user:extra", "x")
    new.hset("cart:3", "qty", "999")  # same number of fields, another value
    new.set("tmp:5", "filtered out, never reported")

    m_topo = discover(parse_endpoint(standalone.url, "pairs[0] (move).master"))
    r_topo = discover(parse_endpoint({"url": target.url(), "topology": "cluster"}, "pairs[0] (move).replica"))
    tasks = side_tasks("master", m_topo, dbs=[0]) + side_tasks("replica", r_topo, dbs=[0, 1])
    assert [t.dbs for t in tasks if t.side == "replica"] == [(0,)] * 3  # a cluster side is db 0
    keys = KeyFilter(("user:*", "cart:*"), ("tmp:*",))
    fleet = snapshot_fleet(tasks, tmp_path, OPTIONS, spark=spark, key_filter=keys)
    assert fleet.errors == []
    assert sum(r.filtered_out for r in fleet.side("master")) == 100
    assert sum(r.filtered_out for r in fleet.side("replica")) == 100
    side = json.loads((tmp_path / "replica" / "snapshot.json").read_text())
    assert [s["status"] for s in side["shards"]] == ["ok"] * 3 and side["stats"]["filtered_out"] == 100
    assert side["start"]["info_keyspace"] == {"db0": {"keys": "900"}}  # what the three masters hold
    assert len(list((tmp_path / "replica" / "keys.parquet").glob("shard-*.parquet"))) == 3
    coverage, cands = _diff(spark, tmp_path)
    assert (coverage["master_keys"], coverage["replica_keys"]) == (800, 800)

    reader = ClusterKeyReader(r_topo, page=100, window_bytes=1 << 20)
    pipe = RespPipe(old)
    try:
        survivors, _ = recheck(
            spark, cands, pipe, reader, rounds=1, interval_s=0.1, tolerance_ms=2000, page=100, window_bytes=1 << 20
        )
        found = sorted((r["db"], bytes(r["key"]), r["category"]) for r in survivors.collect())
        assert found == [
            (0, b"cart:3", "value_mismatch"),
            (0, b"user:7", "missing_on_replica"),
            (0, b"user:extra", "extra_on_replica"),
        ]
        fields = field_diff(pipe, reader.pipe_for(b"cart:3"), b"cart:3", "hash")
        assert fields is not None and fields.items == [
            {"field": '"qty"', "state": "differs", "master": '"3"', "replica": '"999"'}
        ]
    finally:
        pipe.close()
        reader.close()
    by_mode = {
        m: sorted(bytes(r["key"]) for r in apply_mode(cands, m).where("category IS NOT NULL").collect())
        for m in ("full", "length", "keys")
    }
    assert by_mode == {
        "full": [b"cart:3", b"user:7", b"user:extra"],
        "length": [b"user:7", b"user:extra"],  # cart:3 kept its field count
        "keys": [b"user:7", b"user:extra"],
    }
    plan = write_plan(survivors.collect(), tmp_path, pair="move", run_id="r", master="redis://old", replica="cluster")
    lines = [e for e in map(parse_line, plan.path.read_text().splitlines()) if e]
    assert lines == [("RESYNC", 0, b"cart:3"), ("RESYNC", 0, b"user:7"), ("DELETE", 0, b"user:extra")] or sorted(
        lines
    ) == sorted([("RESYNC", 0, b"cart:3"), ("RESYNC", 0, b"user:7"), ("DELETE", 0, b"user:extra")])


def test_repair_plan_applied_by_redis_cli(spark: Any, standalone: RedisServer, tmp_path: Path) -> None:
    """The plan's documented pipelines, run with the real redis-cli, make the two servers agree."""
    new_server = RedisServer(free_port(), tmp_path / "new").start()
    try:
        old, new = standalone.client(), new_server.client()
        awkward = [b"a key with spaces", b'quote"and\\slash', b"bin\x00\xff\n", b"plain"]
        for k in awkward:
            old.set(k, k + b"-value")
            new.set(k, k + b"-value")
        old.set(b"ttl key", b"v", px=600_000)
        new.set(b"ttl key", b"v")  # no expiry on the new side
        new.delete(awkward[1])
        new.set(awkward[2], b"stale")
        new.set(b"only new\x01", b"x")
        tasks = side_tasks("master", discover(parse_endpoint(standalone.url, "m"))) + side_tasks(
            "replica", discover(parse_endpoint(new_server.url, "r"))
        )
        assert snapshot_fleet(tasks, tmp_path / "s1", OPTIONS).errors == []
        _, cands = _diff(spark, tmp_path / "s1")
        plan = write_plan(
            cands.collect(), tmp_path, pair="p", run_id="r", master=standalone.url, replica=new_server.url
        )
        assert (plan.resync, plan.delete) == (3, 1)
        deletes = (
            f"grep '^DELETE 0 ' {plan.path} | cut -d' ' -f3- | sed 's/^/DEL /' | redis-cli -p {new_server.port} -n 0"
        )
        to_new = f'MIGRATE 127.0.0.1 {new_server.port} "" 0 5000 COPY REPLACE KEYS '
        migrate = (
            f"grep '^RESYNC 0 ' {plan.path} | cut -d' ' -f3- "
            f"| sed 's/^/{to_new}/' | redis-cli -p {standalone.port} -n 0"
        )
        for cmd in (deletes, migrate):
            done = subprocess.run(["bash", "-c", cmd], capture_output=True, timeout=30, check=True)
            assert b"ERR" not in done.stdout, done.stdout
        assert snapshot_fleet(tasks, tmp_path / "s2", OPTIONS).errors == []
        coverage, again = _diff(spark, tmp_path / "s2")
        assert again.count() == 0 and coverage["master_keys"] == coverage["replica_keys"] == 5
        assert new.pttl(b"ttl key") > 500_000 and new.get(awkward[2]) == awkward[2] + b"-value"
        assert unquote('"bin\\x00\\xff\\n"') == awkward[2]
    finally:
        new_server.stop()


def test_cluster_side_topology_is_db_zero(target: LocalCluster) -> None:
    topo: Topology = discover(parse_endpoint({"url": target.url(), "topology": "cluster"}, "x"))
    assert {t.dbs for t in side_tasks("replica", topo, dbs=[3, 4])} == {(0,)}
    assert not any(t.readonly for t in side_tasks("master", topo))
