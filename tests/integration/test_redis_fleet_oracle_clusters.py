"""Kind redis over two more cluster shapes against the independent oracle (tests/redis_oracle.py), as
tests/integration/test_redis_fleet_oracle.py does for a 3+3 cluster:

- a cluster whose shards have two replicas (shards 0 and 1) and one (shard 2): each replica audited
  against its own master, findings naming the shard and the replica;
- a migration between two clusters of different slot layouts (3 masters and 4), either way.

A cluster replica refuses every write, so a divergence on ONE replica of a shard is made by planting on
the master in a script that does not replicate (both replicas keep what the master had), then restarting
the replicas meant to stay healthy: a restarted node persists nothing, so it resyncs in full and holds
what the master holds again.

One seed of each here; sweep more with `REDIS_FLEET_ORACLE_SEEDS=1-40`.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import pytest
import redis

from audit.local.redis_cluster import LocalCluster, start_cluster
from audit.local.redis_server import RedisServer
from audit.sources.redis.routing import key_slot
from tests import redis_fleet_oracle as fleet
from tests import redis_oracle as oracle
from tests.integration.helpers import findings, latest_run, run_cli, summary

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """3 masters; shards 0 and 1 with two replicas, shard 2 with one."""
    c = start_cluster(Path(tmp_path_factory.mktemp("wide")))
    try:
        for m in c.masters[:2]:
            c.add_replica(m)
        assert [len(rs) for rs in c.replicas] == [2, 2, 1]
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster of 4 masters and no replica: another slot layout than `wide`'s."""
    c = start_cluster(Path(tmp_path_factory.mktemp("four")), masters=4, replicas_per_master=0)
    yield c
    c.stop()


def _empty(cluster: LocalCluster, rnd: random.Random) -> None:
    """No key anywhere; some nodes (replicas, or a migration's masters) in the big encodings."""
    for m in cluster.masters:
        cluster.node(m).flushall()
    for node in cluster.nodes:
        odd = rnd.random() < 0.4 and (node not in cluster.masters or not cluster.replicas[0])
        for name, v in fleet.ODD.items():
            default = {"--set-max-intset-entries": "512", "--list-max-listpack-size": "-2"}.get(name, "128")
            cluster.node(node).config_set(name.lstrip("-"), v if odd else default)
    cluster.wait_all_in_sync()


def _pair(name: str, cluster: LocalCluster, rnd: random.Random, **more: Any) -> dict[str, Any]:
    master = {"url": cluster.url(), "topology": "cluster"}
    return {"name": name, "kind": "redis", "master": master, "fleet_snapshot": rnd.choice(["threads", "spark"]), **more}


def _got_named(root: Path) -> set[tuple[Any, ...]]:
    """(db, key, category, replica, shard) of every key finding."""
    out = set()
    for f in findings(root):
        if f["category"] in fleet.KEY_CATEGORIES:
            detail = json.loads(f["detail"] or "{}")
            out.add((f["db"], bytes(f["key"]), f["category"], detail.get("replica_node"), detail.get("shard")))
    return out


# --- a cluster whose shards have two replicas -----------------------------------------------------------------


def _resync(cluster: LocalCluster, replicas: list[RedisServer]) -> None:
    """Restart `replicas`: each comes back empty and copies its master whole (a full resync)."""
    for r in replicas:
        r.stop()
    for r in replicas:
        cluster.restart(r)
    cluster.wait_healthy()


@pytest.mark.parametrize("seed", fleet.seeds([7]))
def test_two_replicas_a_shard_divergences_on_one_are_what_the_oracle_finds(
    seed: int, wide: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rnd = random.Random(seed)
    _empty(wide, rnd)
    keys = oracle.fill(wide.cluster_client(), rnd, rnd.choice([0, 60, 400]))
    wide.wait_all_in_sync()
    owner = fleet.owner(wide)
    fields, keep, mode = fleet.options(rnd)
    healed = []
    for i, m in enumerate(wide.masters):
        mine = [k for k in keys if owner[key_slot(k)] == i]
        node = fleet.Unreplicated(host="127.0.0.1", port=m.port, protocol=2)
        planted = rnd.randrange(1 if i == 0 else 0, 8)
        oracle.plant(node, rnd, mine, planted, own=lambda n, i=i: fleet.own_name(owner, i, n))
        # which replicas keep the divergence: shard 0 one of its two, the others one, both or none
        n = len(wide.replicas[i])
        kept = rnd.choice([[0], [1]] if i == 0 else [[0], [1], [0, 1], []] if n == 2 else [[0], []])
        healed += [r for j, r in enumerate(wide.replicas[i]) if j not in kept]
    _resync(wide, healed)
    # for some seeds slots half migrated: keys of a slot its shard imports are left out (counted, a limit);
    # a slot it migrates is compared, a key its master does not hold there (it answers ASK) as absent
    with _resharding(wide, rnd) if rnd.random() < 0.3 else nullcontext([]) as moving:
        want = set()
        for i, m in enumerate(wide.masters):
            importing = {slot for slot, _, dst in moving if dst == m}
            on_master = _read_except(wide.node(m), importing)
            for r in wide.replicas[i]:
                for k, category in fleet.want(on_master, _read_except(fleet.readonly(r), importing), keep, mode):
                    want.add((0, k, category, fleet.addr(r), fleet.addr(m)))

        code, root = fleet.run(tmp_path, monkeypatch, _pair("c", wide, rnd, **fields), rnd)

    fleet.assert_same(want, _got_named(root))
    assert code == (1 if want else 0)
    assert summary(root)["pairs"][0]["not_covered"] == []


def _read_except(c: redis.Redis, slots: set[int]) -> dict[bytes, oracle.Read]:
    """oracle.read_whole, but for the keys of `slots` (a node importing a slot answers MOVED for them)."""
    scan = c.scan_iter
    c.scan_iter = lambda *a, **kw: (k for k in scan(*a, **kw) if key_slot(k) not in slots)  # type: ignore[method-assign]
    return oracle.read_whole(c)


@pytest.mark.parametrize("seed", fleet.seeds([8]))
def test_two_replicas_a_shard_healthy_under_random_writes_has_no_finding(
    seed: int, wide: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rnd = random.Random(seed)
    _empty(wide, rnd)
    cc = wide.cluster_client()
    keys = oracle.fill(cc, rnd, rnd.choice([60, 400])) + oracle.fill_big(cc)
    wide.wait_all_in_sync()
    pair = _pair("c", wide, rnd, **fleet.options(rnd)[0])
    with oracle.writing([(wide.cluster_client(), seed * 10 + i, keys) for i in range(2)]) as writes:
        code, root = fleet.run(tmp_path, monkeypatch, pair, rnd)

    s = summary(root)["pairs"][0]
    assert len(writes) == 2 and sum(done for done, _ in writes) > 200, writes
    assert findings(root) == [], findings(root)[:5]
    assert (code, s["status"], s["not_covered"]) == (0, "passed", [])
    assert "snapshot: 8 nodes read" in json.dumps(s), s  # 3 masters and their 5 replicas


# --- a migration between two clusters -------------------------------------------------------------------------


def _copy(src: dict[bytes, oracle.Read], dst: redis.RedisCluster, rnd: random.Random) -> None:
    """Every key of `src` written anew through `dst`, in a random order and its elements shuffled (another
    insertion order, encoding and node than the source's), with the same absolute expiry."""
    items = list(src.items())
    rnd.shuffle(items)
    for k, (kind, v, expire_at) in items:
        v = list(v) if kind != "string" else v
        if kind in ("hash", "set", "zset"):
            rnd.shuffle(v)
        if kind == "string":
            dst.set(k, v)
        elif kind == "hash":
            dst.hset(k, mapping=dict(v))
        elif kind == "list":
            dst.rpush(k, *v)
        elif kind == "set":
            dst.sadd(k, *v)
        elif kind == "zset":
            dst.zadd(k, {member: float(score) for member, score in v})
        else:  # a stream: its entries, ids kept
            for entry_id, entry in v:
                dst.xadd(k, dict(entry), id=entry_id)
        if expire_at is not None:
            dst.pexpireat(k, expire_at)


def _whole(cluster: LocalCluster) -> dict[bytes, oracle.Read]:
    out: dict[bytes, oracle.Read] = {}
    for m in cluster.masters:
        out.update(oracle.read_whole(cluster.node(m)))
    return out


def _migration(
    wide: LocalCluster, four: LocalCluster, rnd: random.Random, planted: int
) -> tuple[dict[str, Any], set[tuple[Any, ...]], int]:
    """Keys on one cluster, copied onto the other, `planted` changes on either: the pair (either way), what
    the oracle says it must find, and how many of the source's keys the pair's filter keeps."""
    _empty(wide, rnd)
    _empty(four, rnd)
    clusters = [wide, four]
    rnd.shuffle(clusters)  # the migration's source
    source, target = clusters
    keys = oracle.fill(source.cluster_client(), rnd, rnd.choice([0, 60, 400]))
    _copy(_whole(source), target.cluster_client(), rnd)
    if planted:
        oracle.plant(rnd.choice(clusters).cluster_client(), rnd, keys, planted)
    source.wait_all_in_sync()
    fields, keep, mode = fleet.options(rnd)
    on_source = _whole(source)
    want = {(0, k, category, None) for k, category in fleet.want(on_source, _whole(target), keep, mode)}
    pair = _pair("m", source, rnd, replica={"url": target.url(), "topology": "cluster"}, check_replication=False)
    return pair | fields, want, sum(map(keep, on_source))


@contextmanager
def _resharding(cluster: LocalCluster, rnd: random.Random) -> Iterator[list[tuple[int, RedisServer, RedisServer]]]:
    """Up to 3 slots holding keys left half migrated to another master (some of their keys moved, the
    rest not) for the block, then finished; yields each one's (slot, migrating master, importing master)."""
    owner = fleet.owner(cluster)
    moving = []
    for slot in _slots_to_move(cluster, rnd):
        src = cluster.masters[owner[slot]]
        dst = rnd.choice([m for m in cluster.masters if m != src])
        cluster.node(dst).execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", cluster.node_id(src))
        cluster.node(src).execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", cluster.node_id(dst))
        keys = cluster.node(src).execute_command("CLUSTER", "GETKEYSINSLOT", slot, 10_000)
        _move(src, dst, rnd.sample(keys, rnd.randrange(0, len(keys) + 1)))
        moving.append((slot, src, dst))
    cluster.wait_all_in_sync()
    try:
        yield moving
    finally:
        for slot, src, dst in moving:
            _move(src, dst, cluster.node(src).execute_command("CLUSTER", "GETKEYSINSLOT", slot, 10_000))
            for m in cluster.masters:
                cluster.node(m).execute_command("CLUSTER", "SETSLOT", slot, "NODE", cluster.node_id(dst))
        cluster.wait_healthy()


def _slots_to_move(cluster: LocalCluster, rnd: random.Random) -> list[int]:
    """Up to 3 slots holding keys; for half the seeds one holding a key only a replica holds when there is
    one (its master answers ASK for it once the slot migrates: the key's absence there)."""
    held = sorted({key_slot(k) for m in cluster.masters for k in cluster.node(m).scan_iter(count=1000)})
    stale = set()
    for m, replicas in zip(cluster.masters, cluster.replicas, strict=True):
        on_master = set(cluster.node(m).scan_iter(count=1000))
        for r in replicas:
            stale |= {key_slot(k) for k in fleet.readonly(r).scan_iter(count=1000) if k not in on_master}
    picked = rnd.sample(held, min(len(held), rnd.randrange(1, 4)))
    if stale and rnd.random() < 0.5:
        picked = [rnd.choice(sorted(stale)), *(s for s in picked if s not in stale)][:3]
    return picked


def _move(src: RedisServer, dst: RedisServer, keys: list[bytes]) -> None:
    if keys:
        src.client().execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *keys)


def _verify(
    tmp: Path, mp: pytest.MonkeyPatch, pair: dict[str, Any], rnd: random.Random
) -> tuple[int, Path, dict[str, Any]]:
    """The pair through `verify` (its compare mode and filter as --option): exit code, run, certificate."""
    args = ["verify", "--source", json.dumps(pair["master"]), "--target", json.dumps(pair["replica"])]
    args += [f"--option={k}={json.dumps(pair[k])}" for k in ("compare", "keys") if k in pair]
    settings = {
        **fleet.FAST,
        "fleet_snapshot": pair["fleet_snapshot"],
        "big_key_elements": rnd.choice([10, 50, 10_000]),
    }
    args += [f"--setting={k}={v}" for k, v in settings.items()]
    code = run_cli([*args, "-o", str(tmp / "out"), "--quiet"], mp)
    root = latest_run(tmp / "out")
    return code, root, json.loads((root / "certificate.json").read_text())


@pytest.mark.parametrize("seed", fleet.seeds([9]))
def test_cluster_to_cluster_planted_divergences_are_what_the_oracle_finds(
    seed: int, wide: LocalCluster, four: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through `run` or `verify` (whose certificate passes exactly when the oracle finds nothing), with
    slots of either cluster half migrated for some seeds: each key is read where the cluster serves it.
    (A verification's zero tolerance gates the informational slot_migration findings too: resharding
    fails a certificate.)"""
    rnd = random.Random(seed)
    pair, want, _ = _migration(wide, four, rnd, rnd.randrange(1, 12))

    resharded = rnd.choice([wide, four]) if rnd.random() < 0.5 else None
    with _resharding(resharded, rnd) if resharded else nullcontext([]) as moving:
        if rnd.random() < 0.5:
            code, root = fleet.run(tmp_path, monkeypatch, pair, rnd)
            assert code == (1 if want else 0)
        else:
            code, root, cert = _verify(tmp_path, monkeypatch, pair, rnd)
            assert (code, cert["verdict"]) == ((1, "failed") if want or moving else (0, "passed")), cert["reasons"]
            if moving and not want:
                assert cert["reasons"] == [f"gate failed: slot_migration={2 * len(moving)} (max 0)"]

    fleet.assert_same(want, fleet.got(root))
    assert summary(root)["pairs"][0]["not_covered"] == []


@pytest.mark.parametrize("seed", fleet.seeds([10]))
def test_cluster_to_cluster_a_faithful_copy_has_no_finding(
    seed: int, wide: LocalCluster, four: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through `verify`: its certificate passes, with equal content digests (another slot layout, insertion
    order and encoding on the target: the same content)."""
    rnd = random.Random(seed)
    pair, want, kept = _migration(wide, four, rnd, 0)
    assert want == set()  # the oracle's own check of the copy

    code, root, cert = _verify(tmp_path, monkeypatch, pair, rnd)

    assert findings(root) == [], findings(root)[:5]
    assert (code, cert["verdict"], cert["reasons"], cert["digests_equal"]) == (0, "passed", [], True)
    assert cert["source"]["content"]["keys"] == cert["target"]["content"]["keys"] == kept


def test_a_divergence_in_a_slot_being_migrated_away_is_found_while_its_key_stays(
    wide: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slot its shard is migrating still serves the keys its master holds: a key its replicas lack was
    left out as "moved out of their shard during the audit (resharding)", and the pair passed (exit 0)."""
    rnd = random.Random(0)
    _empty(wide, rnd)
    cc = wide.cluster_client()
    for i in range(10):
        cc.set(b"{mig}:%d" % i, b"v")
    wide.wait_all_in_sync()
    slot, owner = key_slot(b"{mig}"), fleet.owner(wide)
    src = wide.masters[owner[slot]]
    dst = next(m for m in wide.masters if m != src)
    fleet.Unreplicated(host="127.0.0.1", port=src.port, protocol=2).set(b"{mig}:stays", b"only on the master")
    wide.node(dst).execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", wide.node_id(src))
    wide.node(src).execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", wide.node_id(dst))
    try:
        code, root = fleet.run(tmp_path, monkeypatch, _pair("c", wide, rnd), rnd)
    finally:
        for m in (src, dst):
            wide.node(m).execute_command("CLUSTER", "SETSLOT", slot, "STABLE")
        wide.wait_healthy()

    replicas = wide.replicas[wide.masters.index(src)]
    assert _got_named(root) == {
        (0, b"{mig}:stays", "missing_on_replica", fleet.addr(r), fleet.addr(src)) for r in replicas
    }
    assert code == 1
    assert summary(root)["pairs"][0]["metrics"]["keys_in_moving_slots"] == 0


def _half_migrating(cluster: LocalCluster, slot: int) -> tuple[RedisServer, RedisServer]:
    """`slot` set migrating from its master to another one (the importing node): (source, target)."""
    src = cluster.masters[fleet.owner(cluster)[slot]]
    dst = next(m for m in cluster.masters if m != src)
    cluster.node(dst).execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", cluster.node_id(src))
    cluster.node(src).execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", cluster.node_id(dst))
    return src, dst


def _finish(cluster: LocalCluster, slot: int, src: RedisServer, dst: RedisServer) -> None:
    """The slot's migration finished: its keys left on the source moved, the slot given to the target."""
    _move(src, dst, cluster.node(src).execute_command("CLUSTER", "GETKEYSINSLOT", slot, 10_000))
    for m in cluster.masters:
        cluster.node(m).execute_command("CLUSTER", "SETSLOT", slot, "NODE", cluster.node_id(dst))
    cluster.wait_healthy()


def test_a_key_only_the_replicas_hold_in_a_slot_being_migrated_away_is_found(
    wide: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slot half migrated, and one key MIGRATE moved whose DEL its source's replicas never applied: they
    keep a stale copy. The master answers ASK for it (it does not hold it); its replicas (READONLY), not
    told the slot is migrating, answer its value. The key was left out as if resharded away, and the
    pair passed (exit 0): it is the replicas' extra key, in the shard of the migrating master."""
    rnd = random.Random(0)
    _empty(wide, rnd)
    cc = wide.cluster_client()
    owner = fleet.owner(wide)
    tag = next(t for t in (b"{mig%d}" % n for n in range(100)) if len(wide.replicas[owner[key_slot(t)]]) == 2)
    keys, stale = [tag + b":%d" % i for i in range(10)], tag + b":stale"
    for k in [*keys, stale]:
        cc.set(k, b"v")
    wide.wait_all_in_sync()
    slot = key_slot(tag)
    src, dst = _half_migrating(wide, slot)
    try:
        _move(src, dst, keys[:5])  # half the slot moved, each key's DEL replicated
        src.client().execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "COPY", "KEYS", stale)
        fleet.Unreplicated(host="127.0.0.1", port=src.port, protocol=2).delete(stale)  # the lost DEL
        wide.wait_all_in_sync()
        code, root = fleet.run(tmp_path, monkeypatch, _pair("c", wide, rnd), rnd)
    finally:
        _finish(wide, slot, src, dst)

    replicas = wide.replicas[wide.masters.index(src)]
    assert _got_named(root) == {(0, stale, "extra_on_replica", fleet.addr(r), fleet.addr(src)) for r in replicas}
    assert len(replicas) == 2
    assert sorted(f["category"] for f in findings(root) if f["category"] not in fleet.KEY_CATEGORIES) == [
        "slot_migration",
        "slot_migration",
    ]
    assert code == 1
    m = summary(root)["pairs"][0]["metrics"]
    assert (m["recheck_unreadable"], m["recheck_divergent"]) == (0, len(replicas))


def _write_one_key_at_a_time(
    cc: redis.RedisCluster, rnd: random.Random, keys: list[bytes], stop: threading.Event
) -> int:
    """Single-key writes to `keys` until `stop` (a key of a migrating slot the source no longer holds is
    written on the importing node, ASK followed; a RENAME or MULTI there would answer TRYAGAIN)."""
    done = 0
    while not stop.is_set():
        k = rnd.choice(keys)
        op = rnd.random()
        if op < 0.5:
            cc.set(k, b"v%d" % rnd.randrange(100), keepttl=rnd.random() < 0.5)
        elif op < 0.7:
            cc.pexpire(k, rnd.randrange(60_000, 9_000_000))
        elif op < 0.8:
            cc.persist(k)
        else:
            cc.delete(k)
        done += 1
        time.sleep(0.001)
    return done


def test_a_healthy_shard_migrating_a_slot_under_writes_has_no_finding(
    wide: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slot being migrated key by key throughout the audit while clients write to it and elsewhere: a
    key moved to the importing node is on neither the source master (ASK: absent) nor, once it has
    applied the DEL, its replicas; while a replica lags the recheck waits for its offset. No finding but
    the resharding's own (info)."""
    rnd = random.Random(1)
    _empty(wide, rnd)
    cc = wide.cluster_client()
    keys = oracle.fill(cc, rnd, 200)
    # a slot none of the random writer's keys hashes to (a RENAME or MULTI there answers TRYAGAIN)
    taken = {key_slot(k) for k in [*keys, *(b"new:%d" % i for i in range(300))]}
    tag = next(t for t in (b"{mig%d}" % n for n in range(100)) if key_slot(t) not in taken)
    moving = [tag + b":%d" % i for i in range(400)]
    for k in moving:
        cc.set(k, b"v%d" % rnd.randrange(100))
    wide.wait_all_in_sync()
    slot = key_slot(tag)
    src, dst = _half_migrating(wide, slot)
    stop, moved, wrote = threading.Event(), [], []

    def migrate_slowly() -> None:  # a resharding's pace: a key at a time, all through the audit
        while not stop.is_set():
            batch = src.client().execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1)
            if batch:
                _move(src, dst, batch)
                moved.extend(batch)
            time.sleep(0.05)

    threads = [
        threading.Thread(target=migrate_slowly),
        threading.Thread(
            target=lambda: wrote.append(_write_one_key_at_a_time(wide.cluster_client(), rnd, moving, stop))
        ),
    ]
    try:
        _move(src, dst, moving[:100])
        with oracle.writing([(wide.cluster_client(), 20, keys)]) as writes:
            for t in threads:
                t.start()
            try:
                code, root = fleet.run(tmp_path, monkeypatch, _pair("c", wide, rnd), rnd)
            finally:
                stop.set()
                for t in threads:
                    t.join()
    finally:
        _finish(wide, slot, src, dst)

    assert moved and wrote and wrote[0] > 100 and writes and writes[0][0] > 100, (len(moved), wrote, writes)
    assert [f["category"] for f in findings(root)] == ["slot_migration", "slot_migration"], findings(root)[:5]
    assert code == 0
    m = summary(root)["pairs"][0]["metrics"]
    # keys moved between a shard's two reads were compared (ASK on the master: absent) and converged
    assert m["recheck_candidates"] > 0 and m["recheck_converged"] == m["recheck_candidates"], m
    assert m["recheck_unreadable"] == 0
