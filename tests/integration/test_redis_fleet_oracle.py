"""Kind redis over fleets against the independent oracle (tests/redis_oracle.py): a real 3+3 Redis Cluster,
a Sentinel group of a master and two replicas, and a standalone server migrated into the cluster; random
keyspaces, random divergences planted, or random writes while the audit runs, and the findings compared
with what each shard's (or group's) nodes read whole in plain Python say they must be.

A cluster replica refuses writes whatever `replica-read-only` says (MOVED to its master, from a script
too), so a cluster's divergences are planted on the shard's master, in a script that does not replicate:
the replica keeps what the master had. A sentinel group's replicas are made writable and planted on, as
the standalone oracle does.

One seed of each here; sweep more with `REDIS_FLEET_ORACLE_SEEDS=1-40` (the servers are shared by the
module and emptied for each seed).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.local.redis_cluster import LocalCluster, start_cluster
from audit.local.redis_sentinel import SentinelGroup, start_sentinel_group
from audit.local.redis_server import RedisServer, free_port, wait_acked, wait_link_up
from audit.sources.redis.routing import key_slot
from tests import redis_fleet_oracle as fleet
from tests import redis_oracle as oracle
from tests.integration.helpers import findings, summary

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = start_cluster(Path(tmp_path_factory.mktemp("cluster")))
    yield c
    c.stop()


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SentinelGroup, RedisServer]]:
    """A sentinel group's master, its replica, and a second replica the sentinel lists too."""
    root = Path(tmp_path_factory.mktemp("sentinel"))
    g = start_sentinel_group(root)
    follow = ["--replicaof", "127.0.0.1", str(g.master.port), "--repl-diskless-sync-delay", "0"]
    second = RedisServer(free_port(), root / "replica2", follow).start()
    try:
        wait_link_up(second)
        g.sentinels[0].wait_replicas(g.service, 2)
        yield g, second
    finally:
        second.stop()
        g.stop()


def _empty_cluster(cluster: LocalCluster, rnd: random.Random) -> None:
    """No key anywhere; the replicas in the big encodings for about half the seeds."""
    for m in cluster.masters:
        cluster.node(m).flushall()
    odd = rnd.random() < 0.5
    for rs in cluster.replicas:
        for r in rs:
            for name, v in fleet.ODD.items():
                default = {"--set-max-intset-entries": "512", "--list-max-listpack-size": "-2"}.get(name, "128")
                cluster.node(r).config_set(name.lstrip("-"), v if odd else default)
    cluster.wait_all_in_sync()


# --- a cluster's replication audit ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", fleet.seeds([2]))
def test_cluster_planted_divergences_are_what_the_oracle_finds(
    seed: int, cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rnd = random.Random(seed)
    _empty_cluster(cluster, rnd)
    keys = oracle.fill(cluster.cluster_client(), rnd, rnd.choice([0, 60, 400]))
    cluster.wait_all_in_sync()
    owner = fleet.owner(cluster)
    fields, keep, mode = fleet.options(rnd)
    want = set()
    for i, m in enumerate(cluster.masters):
        mine = [k for k in keys if owner[key_slot(k)] == i]
        node = fleet.Unreplicated(host="127.0.0.1", port=m.port, protocol=2)
        oracle.plant(node, rnd, mine, rnd.randrange(0, 8), own=lambda n, i=i: fleet.own_name(owner, i, n))
        replica = cluster.replicas[i][0]
        for k, category in fleet.want(oracle.read_whole(node), oracle.read_whole(fleet.readonly(replica)), keep, mode):
            want.add((0, k, category, fleet.addr(replica)))

    pair = {"name": "c", "kind": "redis", "master": {"url": cluster.url(), "topology": "cluster"}, **fields}
    code, root = fleet.run(tmp_path, monkeypatch, {**pair, "fleet_snapshot": rnd.choice(["threads", "spark"])}, rnd)

    fleet.assert_same(want, fleet.got(root))
    assert code == (1 if want else 0)
    assert summary(root)["pairs"][0]["not_covered"] == []


@pytest.mark.parametrize("seed", fleet.seeds([3]))
def test_a_healthy_cluster_under_random_writes_has_no_finding(
    seed: int, cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rnd = random.Random(seed)
    _empty_cluster(cluster, rnd)
    cc = cluster.cluster_client()
    keys = oracle.fill(cc, rnd, rnd.choice([60, 400])) + oracle.fill_big(cc)
    cluster.wait_all_in_sync()
    pair = {"name": "c", "kind": "redis", "master": {"url": cluster.url(), "topology": "cluster"}}
    pair |= fleet.options(rnd)[0]
    with oracle.writing([(cluster.cluster_client(), seed * 10 + i, keys) for i in range(2)]) as writes:
        code, root = fleet.run(tmp_path, monkeypatch, {**pair, "fleet_snapshot": rnd.choice(["threads", "spark"])}, rnd)

    s = summary(root)["pairs"][0]
    assert len(writes) == 2 and sum(done for done, _ in writes) > 200, writes
    assert findings(root) == [], findings(root)[:5]
    assert (code, s["status"], s["not_covered"]) == (0, "passed", [])


# --- a sentinel group's replication audit ---------------------------------------------------------------------


def _empty_group(group: SentinelGroup, second: RedisServer) -> list[RedisServer]:
    group.master.client().flushall()
    replicas = [group.replica, second]
    for r in replicas:
        wait_acked(group.master, r)
        r.client().config_set("replica-read-only", "yes")
    return replicas


def _sentinel_pair(group: SentinelGroup) -> dict[str, Any]:
    master = {"sentinels": group.sentinel_addresses, "service": group.service}
    return {"name": "s", "kind": "redis", "master": master, "fleet_snapshot": "threads"}


@pytest.mark.parametrize("seed", fleet.seeds([4]))
def test_sentinel_planted_divergences_are_what_the_oracle_finds(
    seed: int, group: tuple[SentinelGroup, RedisServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    g, second = group
    rnd = random.Random(seed)
    replicas = _empty_group(g, second)
    dbs = sorted(rnd.sample([0, 1, 2, 5], rnd.randrange(1, 3)))
    keys = {db: oracle.fill(g.master.client(db), rnd, rnd.choice([0, 50, 300])) for db in dbs}
    for r in replicas:
        wait_acked(g.master, r)
    fields, keep, mode = fleet.options(rnd)
    want = set()
    for r in replicas:
        for db in dbs:
            if rnd.random() < 0.7:
                oracle.plant(r.client(db), rnd, keys[db], rnd.randrange(0, 8))
    # the dbs the audit reads: every db the master or a replica lists
    listed = sorted({db for s in (g.master, *replicas) for db in (int(d[2:]) for d in s.client().info("keyspace"))})
    for r in replicas:
        for db in listed:
            for k, category in fleet.want(
                oracle.read_whole(g.master.client(db)), oracle.read_whole(r.client(db)), keep, mode
            ):
                want.add((db, k, category, fleet.addr(r)))

    code, root = fleet.run(tmp_path, monkeypatch, _sentinel_pair(g) | fields, rnd)

    fleet.assert_same(want, fleet.got(root))
    assert code == (1 if want else 0)
    assert summary(root)["pairs"][0]["not_covered"] == []


@pytest.mark.parametrize("seed", fleet.seeds([5]))
def test_a_healthy_sentinel_group_under_random_writes_has_no_finding(
    seed: int, group: tuple[SentinelGroup, RedisServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    g, second = group
    rnd = random.Random(seed)
    replicas = _empty_group(g, second)
    keys = {
        db: oracle.fill(g.master.client(db), rnd, rnd.choice([50, 300])) + oracle.fill_big(g.master.client(db))
        for db in (0, 2)
    }
    for r in replicas:
        wait_acked(g.master, r)
    with oracle.writing([(g.master.client(db), seed * 10 + db, keys[db]) for db in (0, 2)]) as writes:
        code, root = fleet.run(tmp_path, monkeypatch, _sentinel_pair(g) | fleet.options(rnd)[0], rnd)

    s = summary(root)["pairs"][0]
    assert len(writes) == 2 and sum(done for done, _ in writes) > 200, writes
    assert findings(root) == [], findings(root)[:5]
    assert (code, s["status"], s["not_covered"]) == (0, "passed", [])


# --- a migration: a standalone server into the cluster ------------------------------------------------------


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    s = RedisServer(free_port(), Path(tmp_path_factory.mktemp("source"))).start()
    yield s
    s.stop()


@pytest.mark.parametrize("seed", fleet.seeds([6]))
def test_migration_planted_divergences_are_what_the_oracle_finds(
    seed: int, cluster: LocalCluster, source: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A standalone server into the cluster, or back: divergences planted on the target."""
    rnd = random.Random(seed)
    _empty_cluster(cluster, rnd)
    source.client().flushall()
    cc = cluster.cluster_client()
    n, fill_seed = rnd.choice([0, 60, 400]), rnd.randrange(10**9)
    keys = oracle.fill(source.client(), random.Random(fill_seed), n)
    assert oracle.fill(cc, random.Random(fill_seed), n) == keys  # the same keys, values and TTLs
    oracle.fill(source.client(1), rnd, 20)  # another db of the standalone: a migration with a cluster compares db 0
    into_cluster = rnd.random() < 0.6
    oracle.plant(cc if into_cluster else source.client(), rnd, keys, rnd.randrange(0, 12))
    fields, keep, mode = fleet.options(rnd)
    in_cluster: dict[bytes, oracle.Read] = {}
    for m in cluster.masters:
        in_cluster.update(oracle.read_whole(cluster.node(m)))
    sides = [oracle.read_whole(source.client()), in_cluster]
    if not into_cluster:
        sides.reverse()
    want = {(0, k, category, None) for k, category in fleet.want(*sides, keep, mode)}

    ends = [source.url, {"url": cluster.url(), "topology": "cluster"}]
    if not into_cluster:
        ends.reverse()
    pair = {
        "name": "m",
        "kind": "redis",
        "master": ends[0],
        "replica": ends[1],
        "check_replication": False,
        "fleet_snapshot": rnd.choice(["threads", "spark"]),
        **fields,
    }
    code, root = fleet.run(tmp_path, monkeypatch, pair, rnd)

    fleet.assert_same(want, fleet.got(root))
    assert code == (1 if want else 0)
    assert summary(root)["pairs"][0]["not_covered"] == []
