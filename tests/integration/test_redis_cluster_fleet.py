"""A real Redis Cluster (3 masters + 3 replicas, with a password), shared by the module.

Divergences are planted on one shard's master with EVAL + redis.set_repl(redis.REPL_NONE): the write
happens there and never reaches its replica. Tests that reconfigure the cluster put it back; the ones
that stop nodes run last. Each test uses keys of its own prefix.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from audit.diff.keyspace import diff_snapshots
from audit.errors import ConfigError, SourceConnectError
from audit.local.redis_cluster import LocalCluster, start_cluster
from audit.local.redis_server import RedisServer, free_port
from audit.sources.redis.client import connect
from audit.sources.redis.endpoints import parse_endpoint
from audit.sources.redis.fleet_health import (
    probe,
    replication_pairs,
    topology_findings,
    unreachable_error,
    wrong_master_findings,
)
from audit.sources.redis.fleet_snapshot import side_tasks, snapshot_fleet, tasks_frame
from audit.sources.redis.recheck import recheck
from audit.sources.redis.routing import ClusterKeyReader, key_slot
from audit.sources.redis.snapshot import SnapshotOptions
from audit.sources.redis.topology import CLUSTER_ACL, Shard, Topology, describe, discover, discover_cluster

pytestmark = pytest.mark.integration

PASSWORD = "s3cret-pw"
UNREPLICATED = "redis.set_repl(redis.REPL_NONE); return redis.call(unpack(ARGV))"
OPTIONS = SnapshotOptions(qps=1_000_000)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = start_cluster(Path(tmp_path_factory.mktemp("cluster")), password=PASSWORD)
    yield c
    c.stop()


def topology_of(cluster: LocalCluster, seed: RedisServer | None = None) -> Topology:
    return discover(parse_endpoint({"url": cluster.url(seed), "topology": "cluster"}, "pairs[0] (c).master"))


def load(cluster: LocalCluster, prefix: str, n: int) -> list[bytes]:
    keys = [f"{prefix}:{i}".encode() for i in range(n)]
    pipe = cluster.cluster_client().pipeline(transaction=False)
    for i, k in enumerate(keys):
        if i % 3 == 0:
            pipe.hset(k, mapping={"a": i, "b": "x" * (i % 50)})
        else:
            pipe.set(k, b"v%d" % i)
    pipe.execute()
    cluster.wait_all_in_sync()
    return keys


def shard_index(topology: Topology, key: bytes) -> int:
    slot = key_slot(key)
    return next(i for i, s in enumerate(topology.shards) if any(a <= slot <= b for a, b in s.slots))


def plant(cluster: LocalCluster, topology: Topology, key: bytes, *command: object) -> int:
    """Run `command` (about `key`) on the key's shard master, unreplicated; return the shard's index."""
    i = shard_index(topology, key)
    node = cluster.server_at(topology.shards[i].master.port)
    cluster.node(node).eval(UNREPLICATED, 0, *command)
    return i


def heal(cluster: LocalCluster, keys: list[bytes]) -> None:
    """Replicated writes that leave both sides without the keys again."""
    c = cluster.cluster_client()
    for k in keys:
        c.set(k, b"x")
        c.delete(k)
    cluster.wait_all_in_sync()


def audit_replication(
    spark: Any, topology: Topology, out: Path, *, spark_tasks: bool = False
) -> list[tuple[int, bytes, str]]:
    """Fleet snapshot (masters vs their replicas, shard_as_db), diff, recheck: the persisting divergences.

    The snapshot runs as Spark tasks with `spark_tasks`, else in driver threads (faster for tiny shards).
    """
    tasks = side_tasks("master", topology) + side_tasks("replica", topology, replica_index=0)
    fleet = snapshot_fleet(tasks, out, OPTIONS, spark=spark if spark_tasks else None, shard_as_db=True)
    assert fleet.errors == []
    diff_snapshots(spark, str(out / "master/keys.parquet"), str(out / "replica/keys.parquet"), str(out / "cands"), 2000)
    readers = [
        ClusterKeyReader(topology, page=1000, window_bytes=1 << 20, replicas=r, shard_as_db=True) for r in (False, True)
    ]
    try:
        survivors, _ = recheck(
            spark,
            spark.read.parquet(str(out / "cands")),
            *readers,
            rounds=2,
            interval_s=0.2,
            tolerance_ms=2000,
            page=1000,
            window_bytes=1 << 20,
        )
        rows = survivors.select("db", "key", "category").collect()
    finally:
        for r in readers:
            r.close()
    return sorted((r["db"], bytes(r["key"]), r["category"]) for r in rows)


# --- discovery and health -----------------------------------------------------------------------------------


def test_discovery_from_any_node_with_shards_or_slots(cluster: LocalCluster) -> None:
    topo = topology_of(cluster, cluster.replicas[2][0])  # a replica as the seed
    assert topo.kind == "cluster" and topo.source == "CLUSTER SHARDS" and topo.cluster_state == "ok"
    got = [(s.master.port, [r.port for r in s.replicas]) for s in topo.shards]
    assert got == [(m.port, [r.port for r in rs]) for m, rs in zip(cluster.masters, cluster.replicas, strict=True)]
    assert sum(s.slot_count for s in topo.shards) == 16384 and topo.uncovered == () and topo.moves == ()
    older = discover_cluster(cluster.url(cluster.masters[1]), use_shards=False)
    assert older.source == "CLUSTER SLOTS"
    assert [(s.master.addr, s.slots, [r.addr for r in s.replicas]) for s in older.shards] == [
        (s.master.addr, s.slots, [r.addr for r in s.replicas]) for s in topo.shards
    ]
    shown = repr(topo) + repr(describe(topo))
    assert PASSWORD not in shown and "***" in topo.seed
    assert all(PASSWORD in n.url for n in topo.nodes)  # nodes are reached with the seed's credentials


def test_healthy_cluster_has_no_health_findings(cluster: LocalCluster) -> None:
    topo = topology_of(cluster)
    states = probe(topo)
    assert all(s.info is not None for s in states.values()) and unreachable_error(topo, states) is None
    assert topology_findings(topo) == [] and wrong_master_findings(topo, states) == []
    assert len(replication_pairs(topo)) == 3


def test_an_acl_user_without_cluster_commands_is_named_not_a_crash(cluster: LocalCluster) -> None:
    # the README's read-only user on a cluster: CLUSTER SLOTS' NOPERM reply was iterated as slots (exit 4)
    words = ["on", ">pw", "+@read", "+info", "+client|list", "+select", "allkeys"]
    for node in cluster.nodes:
        cluster.node(node).acl_setuser("auditor", reset=True)
        cluster.node(node).execute_command("ACL", "SETUSER", "auditor", *words)  # type: ignore[no-untyped-call]
    seed = cluster.masters[0]
    ep = parse_endpoint({"url": f"redis://auditor:pw@127.0.0.1:{seed.port}", "topology": "cluster"}, "m")
    try:
        with pytest.raises(SourceConnectError) as e:
            discover(ep, role="pair c master")
        assert e.value.where == f"127.0.0.1:{seed.port}"
        assert "refused CLUSTER" in str(e.value) and "NOPERM" in str(e.value) and CLUSTER_ACL in str(e.value)
        for node in cluster.nodes:
            cluster.node(node).execute_command("ACL", "SETUSER", "auditor", *CLUSTER_ACL.split())  # type: ignore[no-untyped-call]
        topo = discover(ep, role="pair c master")
        assert len(topo.shards) == 3 and topo.unreachable == {}
        replica = topo.shards[0].replicas[0]
        connect(replica.url, role="r", readonly=True).close()
        cluster.node(cluster.server_at(replica.port)).execute_command("ACL", "SETUSER", "auditor", "-readonly")  # type: ignore[no-untyped-call]
        with pytest.raises(SourceConnectError, match=r"server refused READONLY \(.*'readonly'"):
            connect(replica.url, role="r", readonly=True)
    finally:
        for node in cluster.nodes:
            cluster.node(node).acl_deluser("auditor")


def test_not_a_cluster_is_a_config_error(tmp_path: Path) -> None:
    plain = RedisServer(free_port(), tmp_path / "plain").start()
    try:
        with pytest.raises(ConfigError, match=r"topology: cluster, but the server is not in cluster mode"):
            discover(parse_endpoint({"url": plain.url, "topology": "cluster"}, "pairs[0] (x).master"))
    finally:
        plain.stop()


def test_a_cluster_node_given_as_a_plain_url_is_a_config_error(
    cluster: LocalCluster, tmp_path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    # read alone, a node is one shard: the replica's reads answered MOVED and the run said "68 not covered"
    from tests.integration.helpers import run_cli, write_inventory

    master, replica = cluster.masters[0], cluster.replicas[0][0]
    pair = {"name": "node", "kind": "redis", "master": cluster.url(master), "replica": cluster.url(replica)}
    inv = write_inventory(tmp_path / "inv.yaml", [pair])
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "redis_mode:cluster" in err and "topology: cluster" in err


# --- fleet snapshot, diff and recheck -----------------------------------------------------------------------


def test_planted_divergences_found_in_their_shard(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    keys = load(cluster, "plant", 3000)
    topo = topology_of(cluster)
    changed, dropped, added = keys[1], keys[2], b"plant:only-on-master"
    s_changed = plant(cluster, topo, changed, "SET", changed, "other")
    s_dropped = plant(cluster, topo, dropped, "DEL", dropped)
    s_added = plant(cluster, topo, added, "SET", added, "x")
    try:
        found = audit_replication(spark, topo, tmp_path, spark_tasks=True)
    finally:
        heal(cluster, [changed, dropped, added])
    assert found == sorted(
        [
            (s_changed, changed, "value_mismatch"),
            (s_dropped, dropped, "extra_on_replica"),
            (s_added, added, "missing_on_replica"),
        ]
    )
    side = (tmp_path / "master" / "keys.parquet").iterdir()
    assert sorted(p.name.split("-")[1] for p in side) == ["000", "001", "002"]  # a file per shard


def test_no_divergence_on_a_healthy_cluster_under_writes(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    load(cluster, "calm", 3000)
    topo = topology_of(cluster)
    stop = threading.Event()

    def writer() -> None:
        c = cluster.cluster_client()
        i = 0
        while not stop.is_set():
            c.set(f"calm:{i % 3000}", i)
            c.hset(f"busy:{i % 500}", "f", i)
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        found = audit_replication(spark, topo, tmp_path)
    finally:
        stop.set()
        t.join()
    assert found == []


def test_passwords_stay_out_of_spark_plans(spark: Any, cluster: LocalCluster) -> None:
    topo = topology_of(cluster)
    df = tasks_frame(spark, side_tasks("master", topo))
    plan = df._jdf.queryExecution().toString()
    assert PASSWORD not in plan and PASSWORD not in str(df.collect())
    assert all(PASSWORD not in repr(t) for t in side_tasks("master", topo))


# --- resharding in progress, stale maps, moved replicas -----------------------------------------------------


def test_migrating_slot_keys_read_on_both_nodes(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    keys = [b"{mig}:%d" % i for i in range(20)]
    cc = cluster.cluster_client()
    for k in keys:
        cc.set(k, k)
    topo = topology_of(cluster)
    slot = key_slot(keys[0])
    src_i = shard_index(topo, keys[0])
    dst_i = (src_i + 1) % 3
    src, dst = topo.shards[src_i].master, topo.shards[dst_i].master
    s_cli, d_cli = (cluster.node(cluster.server_at(n.port)) for n in (src, dst))
    d_cli.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src.node_id)
    s_cli.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst.node_id)
    try:
        s_cli.execute_command("MIGRATE", dst.host, dst.port, "", 0, 5000, "AUTH", PASSWORD, "KEYS", *keys[:10])
        cluster.wait_all_in_sync()
        moving = topology_of(cluster)
        assert {(m.slot, m.state, m.node, m.peer) for m in moving.moves} == {
            (slot, "migrating", src.addr, dst.addr),
            (slot, "importing", dst.addr, src.addr),
        }
        assert {f.category for f in topology_findings(moving)} == {"slot_migration"}
        reader = ClusterKeyReader(moving, page=100, window_bytes=1 << 20)
        try:
            states = reader.read(keys)
        finally:
            reader.close()
        assert sorted(s.key for s in states if s.status == "ok") == sorted(keys)
        assert reader.redirects["ASK"] == 10  # the moved half, found on the importing node
        # mid-migration the replication audit still sees every shard consistent with its replica
        assert audit_replication(spark, moving, tmp_path) == []
    finally:
        s_cli.execute_command("MIGRATE", dst.host, dst.port, "", 0, 5000, "AUTH", PASSWORD, "KEYS", *keys[10:])
        for n in topo.shards:
            cluster.node(cluster.server_at(n.master.port)).execute_command(
                "CLUSTER", "SETSLOT", slot, "NODE", dst.node_id
            )
        cluster.wait_healthy()


def test_moved_replies_followed_with_a_stale_map(cluster: LocalCluster) -> None:
    keys = load(cluster, "moved", 300)
    topo = topology_of(cluster)
    rotated = Topology(
        "cluster",
        topo.seed,
        tuple(Shard(s.master, s.replicas, topo.shards[(i + 1) % 3].slots) for i, s in enumerate(topo.shards)),
    )
    reader = ClusterKeyReader(rotated, page=100, window_bytes=1 << 20)
    try:
        states = reader.read(keys)
    finally:
        reader.close()
    assert sorted(s.key for s in states if s.status == "ok") == sorted(keys)
    assert reader.redirects["MOVED"] > 0


def test_replica_following_another_shard_is_wrong_master(cluster: LocalCluster) -> None:
    topo = topology_of(cluster)
    shard0, shard1 = topo.shards[0], topo.shards[1]
    replica = cluster.server_at(shard0.replicas[0].port)
    cluster.node(replica).execute_command("CLUSTER", "REPLICATE", shard1.master.node_id)
    try:
        _wait_following(cluster, replica, shard1.master.port)
        (f,) = wrong_master_findings(topo, probe(topo))  # discovered before the replica moved
        assert f.category == "wrong_master"
        assert (f.evidence["shard"], f.evidence["replica"], f.evidence["follows_shard"]) == (
            shard0.name,
            shard0.replicas[0].addr,
            shard1.name,
        )
    finally:
        cluster.node(replica).execute_command("CLUSTER", "REPLICATE", shard0.master.node_id)
        _wait_following(cluster, replica, shard0.master.port)
        cluster.wait_healthy()


def _wait_following(cluster: LocalCluster, replica: RedisServer, port: int) -> None:
    deadline = time.time() + 20
    while time.time() < deadline:
        info = cluster.node(replica).info("replication")
        if int(info.get("master_port", 0)) == port and info.get("master_link_status") == "up":
            return
        time.sleep(0.05)
    raise AssertionError(f"replica {replica.port} does not follow {port}")


# --- damage: uncovered slots, unreachable nodes (last: they leave the cluster changed) --------------------------


def test_uncovered_slots_and_clusterdown_are_findings(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    keys = load(cluster, "down", 200)
    topo = topology_of(cluster)
    last = topo.shards[2]
    owner = cluster.server_at(last.master.port)
    lo, hi = last.slots[-1][1] - 9, last.slots[-1][1]
    try:
        _unassign_until_down(cluster, owner, lo, hi)
        broken = topology_of(cluster)
        assert broken.uncovered == ((lo, hi),) and broken.cluster_state == "fail"
        got = {f.category: f for f in topology_findings(broken)}
        assert set(got) == {"uncovered_slots", "cluster_down"}
        assert (got["uncovered_slots"].start_num, got["uncovered_slots"].end_num) == (lo, hi)
        # reading keys of a down cluster: each key unreadable (CLUSTERDOWN), counted, no crash
        fleet = snapshot_fleet(side_tasks("master", broken), tmp_path, OPTIONS, spark=spark)
        assert fleet.errors == []
        stats = [r.meta["stats"] for r in fleet.results if r.meta]
        assert sum(s["keys_error"] for s in stats) == len(keys) + _other_keys(cluster)
        assert any("CLUSTERDOWN" in e for s in stats for e in s["errors_sample"])
    finally:
        cluster.node(owner).execute_command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
        _wait_state(cluster, "ok")


def _other_keys(cluster: LocalCluster) -> int:
    return sum(int(cluster.node(m).dbsize()) for m in cluster.masters) - 200


def _unassign_until_down(cluster: LocalCluster, owner: RedisServer, lo: int, hi: int) -> None:
    """Unassign slots lo..hi everywhere until every node reports cluster_state:fail.

    The owner goes first and the deletion is repeated: a node that has dropped the slots re-learns them
    from any gossip still claiming them (the owner's, or its replica's, which advertises its master's
    slots) until the owner's own claim is gone, so one pass over the nodes can leave a node "ok".
    """
    nodes = [owner, *(n for n in cluster.nodes if n != owner)]

    def unassign() -> None:
        for node in nodes:
            try:
                cluster.node(node).execute_command("CLUSTER", "DELSLOTSRANGE", lo, hi)
            except redis.ResponseError:
                pass  # already unassigned on this node

    _wait_state(cluster, "fail", each_poll=unassign)


def _wait_state(cluster: LocalCluster, state: str, each_poll: Callable[[], None] | None = None) -> None:
    """Poll until every node reports cluster_state:`state` (30 s), calling `each_poll` before each look."""
    deadline = time.time() + 30
    while time.time() < deadline:
        if each_poll is not None:
            each_poll()
        infos = [cluster.node(n).execute_command("CLUSTER", "INFO").decode() for n in cluster.nodes]
        if all(f"cluster_state:{state}" in i for i in infos):
            return
        time.sleep(0.05)
    raise AssertionError(f"cluster_state did not become {state}")


def test_unreachable_nodes_named_others_still_read(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    load(cluster, "gone", 300)
    topo = topology_of(cluster)
    replica = cluster.server_at(topo.shards[2].replicas[0].port)
    master = cluster.server_at(topo.shards[1].master.port)
    replica.stop()
    master.stop()
    try:
        seen = topology_of(cluster, cluster.masters[0])
        assert list(seen.unreachable) == [topo.shards[1].master.addr]  # its shard is still listed
        states = probe(seen)
        err = unreachable_error(seen, states, role="pair sessions master")
        assert err is not None and err.where in (topo.shards[1].master.addr, topo.shards[2].replicas[0].addr)
        text = str(err)
        assert f"shard master {topo.shards[1].master.addr}" in text
        assert f"replica {topo.shards[2].replicas[0].addr} (shard {topo.shards[2].name})" in text
        assert PASSWORD not in text
        tasks = side_tasks("master", seen) + side_tasks("replica", seen, replica_index=0)
        fleet = snapshot_fleet(tasks, tmp_path, OPTIONS, spark=spark, shard_as_db=True)
        failed = {(r.side, r.node) for r in fleet.errors}
        assert failed == {("master", topo.shards[1].master.addr), ("replica", topo.shards[2].replicas[0].addr)}
        assert all(PASSWORD not in (r.error or "") for r in fleet.errors)
        assert len([r for r in fleet.results if r.status == "ok" and r.rows > 0]) == 4  # the others were read
        # the one shard both sides read is still audited; the two broken shards are left out, not "missing"
        m_path, r_path = fleet.comparable_paths(tmp_path)
        coverage = diff_snapshots(spark, m_path, r_path, str(tmp_path / "cands"), 2000)
        (good,) = [r for r in fleet.side("master") if r.status == "ok" and r.ordinal == 0]
        assert coverage["candidates"] == 0 and coverage["master_keys"] == coverage["replica_keys"] == good.rows > 0
    finally:
        cluster.restart(master)
        cluster.restart(replica)
        cluster.wait_healthy()


def test_redis_py_cluster_client_agrees_with_key_slot(cluster: LocalCluster) -> None:
    c = cluster.cluster_client()
    for k in (b"a", b"{x}y", b"\xff\x00", b"user:{42}:cart"):
        assert key_slot(k) == c.keyslot(k)
    assert isinstance(c, redis.RedisCluster)
