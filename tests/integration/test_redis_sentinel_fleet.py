"""A real Sentinel watching a master and its replica: resolution, errors, divergences, wrong_master."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.diff.keyspace import diff_snapshots
from audit.errors import SourceConnectError
from audit.local.redis_sentinel import SentinelGroup, start_sentinel_group
from audit.local.redis_server import RedisServer, free_port, wait_in_sync, wait_link_up
from audit.sources.redis.endpoints import parse_endpoint
from audit.sources.redis.fleet_health import probe, topology_findings, unreachable_error, wrong_master_findings
from audit.sources.redis.fleet_snapshot import side_tasks, snapshot_fleet
from audit.sources.redis.recheck import recheck
from audit.sources.redis.resp import RespPipe
from audit.sources.redis.snapshot import SnapshotOptions
from audit.sources.redis.topology import Topology, discover

pytestmark = pytest.mark.integration

UNREPLICATED = "redis.set_repl(redis.REPL_NONE); return redis.call(unpack(ARGV))"


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelGroup]:
    g = start_sentinel_group(Path(tmp_path_factory.mktemp("sentinel")), sentinels=2)
    yield g
    g.stop()


def resolve(group: SentinelGroup, sentinels: list[str], service: str | None = None) -> Topology:
    ep = parse_endpoint({"sentinels": sentinels, "service": service or group.service}, "pairs[0] (ha).master")
    return discover(ep, role="pair ha master")


def test_resolves_master_and_replica_past_a_dead_sentinel(group: SentinelGroup) -> None:
    dead = f"127.0.0.1:{free_port()}"
    topo = resolve(group, [dead, *group.sentinel_addresses])
    assert topo.kind == "sentinel" and topo.service == group.service
    (shard,) = topo.shards
    assert shard.master.port == group.master.port
    assert [r.port for r in shard.replicas] == [group.replica.port]
    states = probe(topo)
    assert unreachable_error(topo, states) is None
    assert wrong_master_findings(topo, states) == [] and topology_findings(topo) == []


def test_unknown_service_names_the_sentinels(group: SentinelGroup) -> None:
    with pytest.raises(SourceConnectError) as e:
        resolve(group, group.sentinel_addresses, "no-such-service")
    text = str(e.value)
    assert "do not know service 'no-such-service'" in text
    assert all(a in text for a in group.sentinel_addresses) and e.value.where == group.sentinel_addresses[0]


def test_no_sentinel_reachable(group: SentinelGroup) -> None:
    dead = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    with pytest.raises(SourceConnectError, match="no sentinel answered") as e:
        resolve(group, dead)
    assert all(d in str(e.value) for d in dead)


def test_a_data_server_given_as_a_sentinel_is_said_in_its_own_words(group: SentinelGroup) -> None:
    # every error reply once read as "do not know service": the operator then chased the service's name
    not_a_sentinel = f"127.0.0.1:{group.master.port}"
    with pytest.raises(SourceConnectError) as e:
        resolve(group, [not_a_sentinel])
    text = str(e.value)
    assert f"sentinel {not_a_sentinel} refused SENTINEL GET-MASTER-ADDR-BY-NAME" in text
    assert "unknown command" in text.lower() and "do not know service" not in text


def test_divergence_planted_on_the_master_is_found(spark: Any, group: SentinelGroup, tmp_path: Path) -> None:
    m = group.master.client(db=2)
    m.mset({f"s:{i}": i for i in range(500)})
    wait_in_sync(group.master, group.replica)
    m.eval(UNREPLICATED, 0, "SET", "s:7", "other")
    m.eval(UNREPLICATED, 0, "DEL", "s:8")
    topo = resolve(group, group.sentinel_addresses)
    tasks = side_tasks("master", topo, dbs=[0, 2]) + side_tasks("replica", topo, dbs=[0, 2], replica_index=0)
    fleet = snapshot_fleet(tasks, tmp_path, SnapshotOptions(qps=1_000_000))
    assert fleet.errors == [] and all(r.meta is not None and r.meta["dbs"] == [0, 2] for r in fleet.results)
    diff_snapshots(
        spark, str(tmp_path / "master/keys.parquet"), str(tmp_path / "replica/keys.parquet"), str(tmp_path / "c"), 2000
    )
    pipes = [RespPipe(s.client()) for s in (group.master, group.replica)]
    try:
        survivors, _ = recheck(
            spark,
            spark.read.parquet(str(tmp_path / "c")),
            *pipes,
            rounds=1,
            interval_s=0.1,
            tolerance_ms=2000,
            page=100,
            window_bytes=1 << 20,
        )
        found = sorted((r["db"], bytes(r["key"]), r["category"]) for r in survivors.collect())
    finally:
        for p in pipes:
            p.close()
        group.master.client(db=2).flushdb()
        wait_in_sync(group.master, group.replica)
    assert found == [(2, b"s:7", "value_mismatch"), (2, b"s:8", "extra_on_replica")]


def test_replica_following_another_server_is_wrong_master(group: SentinelGroup, tmp_path: Path) -> None:
    other = RedisServer(free_port(), tmp_path / "other", ["--repl-diskless-sync-delay", "0"]).start()
    replica = group.replica.client()
    try:
        replica.replicaof("127.0.0.1", other.port)
        wait_link_up(group.replica)
        topo = resolve(group, group.sentinel_addresses)  # the sentinel still lists it as the group's replica
        assert [r.port for r in topo.shards[0].replicas] == [group.replica.port]
        (f,) = wrong_master_findings(topo, probe(topo))
        assert f.category == "wrong_master"
        assert (f.evidence["shard"], f.evidence["replica"]) == (
            f"127.0.0.1:{group.master.port}",
            f"127.0.0.1:{group.replica.port}",
        )
        assert f.evidence["follows"] == f"127.0.0.1:{other.port}" and f.evidence["follows_shard"] is None
    finally:
        replica.replicaof("127.0.0.1", group.master.port)
        deadline = time.time() + 20
        while replica.info("replication").get("master_port") != group.master.port and time.time() < deadline:
            time.sleep(0.05)
        wait_link_up(group.replica)
        other.stop()
