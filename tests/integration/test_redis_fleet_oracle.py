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

import fnmatch
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from audit.local.redis_cluster import LocalCluster, start_cluster
from audit.local.redis_sentinel import SentinelGroup, start_sentinel_group
from audit.local.redis_server import RedisServer, free_port, wait_acked, wait_link_up
from audit.sources.redis.routing import key_slot
from tests import redis_oracle as oracle
from tests.integration.helpers import findings, latest_run, run_cli, summary, write_inventory

pytestmark = pytest.mark.integration

KEY_CATEGORIES = {"missing_on_replica", "extra_on_replica", "type_mismatch", "value_mismatch", "ttl_mismatch"}
UNREPLICATED = "redis.set_repl(redis.REPL_NONE); return redis.call(unpack(ARGV))"
WRITES = {"DEL", "SET", "PEXPIRE", "PERSIST", "APPEND", "SETRANGE", "HSET", "HDEL", "LSET", "SREM", "SADD"}
WRITES |= {"ZADD", "XADD"}
ODD = dict(zip(oracle.ODD_ENCODINGS[::2], oracle.ODD_ENCODINGS[1::2], strict=True))
FAST = {"recheck_interval_s": 0.2, "recheck_rounds": 2, "recheck_ack_wait_s": 2}
PATTERNS = ["k:*", "k:1*", "*ü", "bin*", "k:[0-4]*", "*:2?", "only-*", "*5", "new*"]
"""Globs whose Redis meaning fnmatch shares (no `[^`, no escapes): the oracle filters with fnmatch."""


def _seeds(default: list[int]) -> list[int]:
    spec = os.environ.get("REDIS_FLEET_ORACLE_SEEDS", "")
    if not spec:
        return default
    first, _, last = spec.partition("-")
    return list(range(int(first), int(last or first) + 1))


class Unreplicated(redis.Redis):
    """A client of one node whose writes stay on it: each runs in a script that does not replicate."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if str(args[0]).upper() in WRITES:
            return super().execute_command("EVAL", UNREPLICATED, 0, *args, **options)
        return super().execute_command(*args, **options)


def readonly(server: RedisServer) -> redis.Redis:
    """A client of a cluster replica that may read its slots' keys (READONLY, on its only connection)."""
    c = redis.Redis(host="127.0.0.1", port=server.port, protocol=2, single_connection_client=True)
    c.execute_command("READONLY")
    return c


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
            for name, v in ODD.items():
                default = {"--set-max-intset-entries": "512", "--list-max-listpack-size": "-2"}.get(name, "128")
                cluster.node(r).config_set(name.lstrip("-"), v if odd else default)
    cluster.wait_all_in_sync()


def _owner(cluster: LocalCluster) -> dict[int, int]:
    """slot -> the index of the master serving it."""
    owner = {}
    for i, m in enumerate(cluster.masters):
        for line in cluster.node(m).execute_command("CLUSTER", "NODES").decode().splitlines():
            parts = line.split()
            if "myself" in parts[2]:
                for item in parts[8:]:
                    if not item.startswith("["):
                        a, _, b = item.partition("-")
                        owner.update(dict.fromkeys(range(int(a), int(b or a) + 1), i))
    return owner


def _own_name(owner: dict[int, int], shard: int, i: int) -> bytes:
    """A key name (`only-master:<i>:<n>`) whose slot the shard serves."""
    n = 0
    while owner[key_slot(b"only-master:%d:%d" % (i, n))] != shard:
        n += 1
    return b"only-master:%d:%d" % (i, n)


Keep = Any  # bytes -> bool


def _options(rnd: random.Random) -> tuple[dict[str, Any], Keep, str]:
    """A random compare mode and, for some seeds, a key filter: (the pair's fields, the keys it keeps, mode)."""
    mode = rnd.choice(["full", "full", "length", "keys"])
    include = rnd.sample(PATTERNS, rnd.choice([0, 0, 1, 2]))
    exclude = rnd.sample(PATTERNS, rnd.choice([0, 0, 1]))

    def keep(k: bytes) -> bool:
        hit = lambda ps: any(fnmatch.fnmatchcase(k, p.encode()) for p in ps)  # noqa: E731
        return (not include or hit(include)) and not hit(exclude)

    fields: dict[str, Any] = {"compare": mode}
    if include or exclude:
        fields["keys"] = {"include": include, "exclude": exclude}
    return fields, keep, mode


def _want(master: dict[bytes, oracle.Read], replica: dict[bytes, oracle.Read], keep: Keep, mode: str) -> set[Any]:
    def kept(reads: dict[bytes, oracle.Read]) -> dict[bytes, oracle.Read]:
        return {k: v for k, v in reads.items() if keep(k)}

    return oracle.expected(kept(master), kept(replica), mode)


def _run(tmp: Path, mp: pytest.MonkeyPatch, pair: dict[str, Any], rnd: random.Random) -> tuple[int, Path]:
    tmp.mkdir(parents=True, exist_ok=True)
    # pages of 10 or 50 elements: most collections are read in several pages, some in one
    inv = write_inventory(tmp / "inv.json", [pair], big_key_elements=rnd.choice([10, 50, 10_000]), **FAST)
    code = run_cli(["run", "-i", str(inv), "-o", str(tmp / "out"), "--quiet"], mp)
    return code, latest_run(tmp / "out")


def _got(root: Path) -> set[tuple[Any, ...]]:
    """(db, key, category, replica) of every key finding (the replica's address in a replication audit)."""
    out = set()
    for f in findings(root):
        if f["category"] in KEY_CATEGORIES:
            replica = json.loads(f["detail"] or "{}").get("replica")  # a migration's: the key's read there
            out.add((f["db"], bytes(f["key"]), f["category"], replica if isinstance(replica, str) else None))
    return out


def _assert_same(want: set[tuple[Any, ...]], got: set[tuple[Any, ...]]) -> None:
    assert (sorted(want - got), sorted(got - want)) == ([], []), "(only the oracle's, only the audit's)"


def addr(server: RedisServer) -> str:
    return f"127.0.0.1:{server.port}"


# --- a cluster's replication audit ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", _seeds([2]))
def test_cluster_planted_divergences_are_what_the_oracle_finds(
    seed: int, cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rnd = random.Random(seed)
    _empty_cluster(cluster, rnd)
    keys = oracle.fill(cluster.cluster_client(), rnd, rnd.choice([0, 60, 400]))
    cluster.wait_all_in_sync()
    owner = _owner(cluster)
    fields, keep, mode = _options(rnd)
    want = set()
    for i, m in enumerate(cluster.masters):
        mine = [k for k in keys if owner[key_slot(k)] == i]
        node = Unreplicated(host="127.0.0.1", port=m.port, protocol=2)
        oracle.plant(node, rnd, mine, rnd.randrange(0, 8), own=lambda n, i=i: _own_name(owner, i, n))
        replica = cluster.replicas[i][0]
        for k, category in _want(oracle.read_whole(node), oracle.read_whole(readonly(replica)), keep, mode):
            want.add((0, k, category, addr(replica)))

    pair = {"name": "c", "kind": "redis", "master": {"url": cluster.url(), "topology": "cluster"}, **fields}
    code, root = _run(tmp_path, monkeypatch, {**pair, "fleet_snapshot": rnd.choice(["threads", "spark"])}, rnd)

    _assert_same(want, _got(root))
    assert code == (1 if want else 0)
    assert summary(root)["pairs"][0]["not_covered"] == []


@pytest.mark.parametrize("seed", _seeds([3]))
def test_a_healthy_cluster_under_random_writes_has_no_finding(
    seed: int, cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rnd = random.Random(seed)
    _empty_cluster(cluster, rnd)
    cc = cluster.cluster_client()
    keys = oracle.fill(cc, rnd, rnd.choice([60, 400])) + oracle.fill_big(cc)
    cluster.wait_all_in_sync()
    pair = {"name": "c", "kind": "redis", "master": {"url": cluster.url(), "topology": "cluster"}}
    pair |= _options(rnd)[0]
    with oracle.writing([(cluster.cluster_client(), seed * 10 + i, keys) for i in range(2)]) as writes:
        code, root = _run(tmp_path, monkeypatch, {**pair, "fleet_snapshot": rnd.choice(["threads", "spark"])}, rnd)

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


@pytest.mark.parametrize("seed", _seeds([4]))
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
    fields, keep, mode = _options(rnd)
    want = set()
    for r in replicas:
        for db in dbs:
            if rnd.random() < 0.7:
                oracle.plant(r.client(db), rnd, keys[db], rnd.randrange(0, 8))
    # the dbs the audit reads: every db the master or a replica lists
    listed = sorted({db for s in (g.master, *replicas) for db in (int(d[2:]) for d in s.client().info("keyspace"))})
    for r in replicas:
        for db in listed:
            for k, category in _want(
                oracle.read_whole(g.master.client(db)), oracle.read_whole(r.client(db)), keep, mode
            ):
                want.add((db, k, category, addr(r)))

    code, root = _run(tmp_path, monkeypatch, _sentinel_pair(g) | fields, rnd)

    _assert_same(want, _got(root))
    assert code == (1 if want else 0)
    assert summary(root)["pairs"][0]["not_covered"] == []


@pytest.mark.parametrize("seed", _seeds([5]))
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
        code, root = _run(tmp_path, monkeypatch, _sentinel_pair(g) | _options(rnd)[0], rnd)

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


@pytest.mark.parametrize("seed", _seeds([6]))
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
    fields, keep, mode = _options(rnd)
    in_cluster: dict[bytes, oracle.Read] = {}
    for m in cluster.masters:
        in_cluster.update(oracle.read_whole(cluster.node(m)))
    sides = [oracle.read_whole(source.client()), in_cluster]
    if not into_cluster:
        sides.reverse()
    want = {(0, k, category, None) for k, category in _want(*sides, keep, mode)}

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
    code, root = _run(tmp_path, monkeypatch, pair, rnd)

    _assert_same(want, _got(root))
    assert code == (1 if want else 0)
    assert summary(root)["pairs"][0]["not_covered"] == []
