"""Kind redis over fleets, end to end through the CLI: a real 3+3 Redis Cluster (with a password) and a
standalone server, shared by the module.

Divergences are planted on one shard's master with EVAL + redis.set_repl(redis.REPL_NONE): the write
happens there and never reaches its replica. Every test starts from an empty cluster; the tests that
break the cluster (uncovered slots, a stopped node) run last and put it back.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from audit.local.redis_cluster import LocalCluster, start_cluster
from audit.local.redis_server import RedisServer, free_port
from audit.sources.redis.repair import parse_line
from audit.sources.redis.routing import key_slot
from tests.integration.helpers import findings, latest_run, run_cli, summary, write_inventory

pytestmark = pytest.mark.integration

PASSWORD = "s3cret-pw"
UNREPLICATED = "redis.set_repl(redis.REPL_NONE); return redis.call(unpack(ARGV))"
FAST = {"recheck_interval_s": 0.2, "recheck_rounds": 2, "recheck_ack_wait_s": 2}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = start_cluster(Path(tmp_path_factory.mktemp("cluster")), password=PASSWORD)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    s = RedisServer(free_port(), Path(tmp_path_factory.mktemp("plain"))).start()
    yield s
    s.stop()


@pytest.fixture()
def empty(cluster: LocalCluster, standalone: RedisServer) -> LocalCluster:
    for m in cluster.masters:
        cluster.node(m).flushall()
    standalone.client().flushall()
    cluster.wait_all_in_sync()
    return cluster


def cluster_pair(cluster: LocalCluster, name: str = "sessions", **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "redis", "master": {"url": cluster.url(), "topology": "cluster"}, **extra}


def migration_pair(
    source: RedisServer, cluster: LocalCluster, name: str = "move-to-cluster", **extra: Any
) -> dict[str, Any]:
    """A standalone server migrated into a cluster: two independent systems, nodes read in threads."""
    return {
        "name": name,
        "kind": "redis",
        "master": source.url,
        "replica": {"url": cluster.url(), "topology": "cluster"},
        "check_replication": False,
        "fleet_snapshot": "threads",
        **extra,
    }


def audit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pairs: list[dict[str, Any]]) -> tuple[int, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    inv = write_inventory(tmp_path / "inv.yaml", pairs, **FAST)
    code = run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch)
    return code, latest_run(tmp_path / "out")


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


def master_of(cluster: LocalCluster, key: bytes) -> RedisServer:
    """The master node serving `key`'s slot (read from the cluster itself)."""
    slot = key_slot(key)
    for m in cluster.masters:
        for line in cluster.node(m).execute_command("CLUSTER", "NODES").decode().splitlines():
            parts = line.split()
            if "myself" in parts[2] and any(_in(slot, r) for r in parts[8:]):
                return m
    raise AssertionError(f"no master owns slot {slot}")


def _in(slot: int, item: str) -> bool:
    if item.startswith("["):
        return False
    a, _, b = item.partition("-")
    return int(a) <= slot <= int(b or a)


def plant(cluster: LocalCluster, key: bytes, *command: object) -> RedisServer:
    """Run `command` (about `key`) on the key's master only: the write does not replicate."""
    m = master_of(cluster, key)
    cluster.node(m).eval(UNREPLICATED, 0, *command)
    return m


def addr(server: RedisServer) -> str:
    return f"127.0.0.1:{server.port}"


def replica_of(cluster: LocalCluster, master: RedisServer) -> RedisServer:
    return cluster.replicas[cluster.masters.index(master)][0]


# --- replication audit of every shard -----------------------------------------------------------------------


def _no_duplicate_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    names = [name for name, _ in pairs]
    assert len(names) == len(set(names)), names
    return dict(pairs)


def test_cluster_replication_audit_finds_each_planted_divergence(
    empty: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = empty
    keys = load(cluster, "s", 600)
    changed_hash, changed_str, dropped, expiring = keys[0], keys[1], keys[2], keys[4]
    added = b"s:only-on-master"
    planted = {
        changed_hash: ("value_mismatch", plant(cluster, changed_hash, "HSET", changed_hash, "a", "changed")),
        changed_str: ("value_mismatch", plant(cluster, changed_str, "SET", changed_str, "new\x00value")),
        dropped: ("extra_on_replica", plant(cluster, dropped, "DEL", dropped)),
        added: ("missing_on_replica", plant(cluster, added, "SET", added, "x")),
        expiring: ("ttl_mismatch", plant(cluster, expiring, "PEXPIRE", expiring, "3600000")),
    }
    code, run = audit(tmp_path, monkeypatch, [cluster_pair(cluster, fleet_snapshot="spark")])
    assert code == 1
    rows = [r for r in findings(run) if r["check"] == "keyspace"]
    got = {bytes(r["key"]): r for r in rows}
    assert set(got) == set(planted)
    for key, (category, master) in planted.items():
        # one name per field: the detail had `replica` twice (what the replica holds, then its address);
        # the findings kept the address alone, and the report lost its side-by-side view of the key
        row, detail = got[key], json.loads(got[key]["detail"], object_pairs_hook=_no_duplicate_names)
        assert isinstance(detail["master"], dict) and isinstance(detail["replica"], dict), detail
        assert (row["category"], row["db"]) == (category, 0)
        assert detail["shard"] == addr(master) and detail["replica_node"] == addr(replica_of(cluster, master))
    fields = json.loads(got[changed_hash]["detail"])["fields"]
    assert (fields["total"], fields["items"]) == (
        1,
        [{"field": '"a"', "state": "differs", "master": '"changed"', "replica": '"0"'}],
    )
    shown = json.loads(got[changed_str]["detail"])["fields"]["items"][0]
    assert (shown["master"], shown["replica"]) == ('"new\\x00value"', '"v1"')
    s = summary(run)["pairs"][0]
    assert any("master: cluster (CLUSTER SHARDS), 3 shards, 3 replicas" in n for n in s["notes"])
    assert any(n.startswith("compare: full") for n in s["notes"])
    assert s["coverage"]["shards"] == 3 and s["coverage"]["master_keys"] == 600  # one added, one dropped
    # every finding was kept by the recheck: summed over the shards, as the other recheck counts are
    assert s["coverage"]["recheck_divergent"] == s["coverage"]["recheck_confirmed_live"] == len(planted)
    plan = (run / s["artifacts"]["repair plan"]).read_text().splitlines()
    actions = {parse_line(line) for line in plan if parse_line(line)}
    assert actions == {
        ("RESYNC", 0, changed_hash),
        ("RESYNC", 0, changed_str),
        ("RESYNC", 0, added),
        ("RESYNC", 0, expiring),
        ("DELETE", 0, dropped),
    }
    # each line under the replica (and shard) it is for
    section, where = None, {}
    for line in plan:
        section = line.removeprefix("# on replica ") if line.startswith("# on replica ") else section
        if parsed := parse_line(line):
            where[parsed[2]] = section
    assert where == {
        key: f"{addr(replica_of(cluster, master))} (shard {addr(master)})" for key, (_, master) in planted.items()
    }
    report = (run / "report.html").read_text()
    assert "repair/sessions.txt" in report and PASSWORD not in report
    assert PASSWORD not in (run / "summary.json").read_text() + (run / "work/sessions/state.json").read_text()


def test_healthy_cluster_under_concurrent_writes_has_no_finding(
    empty: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = empty
    load(cluster, "calm", 1500)
    stop = threading.Event()

    def writer() -> None:
        c = cluster.cluster_client()
        i = 0
        while not stop.is_set():
            c.set(f"calm:{i % 1500}", i)
            c.hset(f"busy:{i % 200}", "f", i)
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        code, run = audit(tmp_path, monkeypatch, [cluster_pair(cluster, fleet_snapshot="threads")])
    finally:
        stop.set()
        t.join()
    assert findings(run) == [] and code == 0, summary(run)["pairs"][0]["counts"]


# --- migration between topologies: key filter and compare modes ---------------------------------------------


def _migration_fixture(cluster: LocalCluster, source: RedisServer) -> None:
    """The source's keys copied into the cluster, then divergences of each kind on the target."""
    src, dst = source.client(), cluster.cluster_client()
    for i in range(200):
        for prefix in ("user", "cart", "tmp", "other"):
            k = f"{prefix}:{i}"
            src.set(k, f"v{i:04d}")
            dst.set(k, f"v{i:04d}")
    src.hset("user:h", mapping={"a": "1", "b": "2"})
    dst.hset("user:h", mapping={"a": "1", "b": "2"})
    dst.delete("user:1")  # missing on the target
    dst.set("user:2", "v9999")  # same length, other value
    dst.set("cart:3", "longer value")  # other length
    dst.hset("user:h", "b", "3")  # a field differs
    dst.set("user:extra", "x")  # only on the target
    dst.set("tmp:4", "ignored")  # excluded
    dst.delete("other:5")  # not included


@pytest.mark.parametrize(
    ("compare", "expected"),
    [
        (
            "full",
            {
                "user:1": "missing_on_replica",
                "user:2": "value_mismatch",
                "cart:3": "value_mismatch",
                "user:h": "value_mismatch",
                "user:extra": "extra_on_replica",
            },
        ),
        ("length", {"user:1": "missing_on_replica", "cart:3": "value_mismatch", "user:extra": "extra_on_replica"}),
        ("keys", {"user:1": "missing_on_replica", "user:extra": "extra_on_replica"}),
    ],
)
def test_standalone_to_cluster_migration(
    compare: str,
    expected: dict[str, str],
    empty: LocalCluster,
    standalone: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _migration_fixture(empty, standalone)
    pair = migration_pair(
        standalone,
        empty,
        keys={"include": ["user:*", "cart:*"], "exclude": ["tmp:*"]},
        compare=compare,
        recheck_max_keys=1 if compare == "keys" else 100,  # over it: reported without a recheck
    )
    code, run = audit(tmp_path, monkeypatch, [pair])
    assert code == 1
    got = {bytes(r["key"]).decode(): r["category"] for r in findings(run) if r["check"] == "keyspace"}
    assert got == expected
    s = summary(run)["pairs"][0]
    assert s["metrics"]["recheck_unrechecked"] == (1 if compare == "keys" else 0)
    assert s["metrics"]["recheck_divergent"] == len(expected) - s["metrics"]["recheck_unrechecked"]
    assert any(n.startswith(f"compare: {compare}") for n in s["notes"])
    assert any("db 0 only: no other db can be compared with a cluster" in n for n in s["notes"])
    # 800 source keys: tmp:* and other:* (400) left out; the target leaves out its tmp:/other: keys too
    assert s["coverage"]["master_keys_filtered_out"] == 400
    assert s["coverage"]["replica_keys_filtered_out"] == 399
    assert s["coverage"]["master_keys"] == 401
    assert any("keys filter include ['user:*', 'cart:*'] exclude ['tmp:*']" in n for n in s["notes"])


def test_migration_certificate_says_the_compare_mode(
    empty: LocalCluster, standalone: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, dst = standalone.client(), empty.cluster_client()
    for i in range(300):
        src.set(f"k:{i}", i)
        dst.set(f"k:{i}", i)
    target = json.dumps({"url": empty.url(), "topology": "cluster"})
    args = ["verify", "--source", standalone.url, "--target", target, "-o", str(tmp_path / "out")]
    code = run_cli([*args, "--option", "compare=length", "--setting", "fleet_snapshot=threads"], monkeypatch)
    assert code == 0
    cert = json.loads((latest_run(tmp_path / "out") / "certificate.json").read_text())
    assert cert["verdict"] == "passed" and cert["source"]["compare"] == "length"
    assert cert["digests_equal"] and cert["source"]["content"]["keys"] == 300
    assert "compare mode: <b>length</b>" in (latest_run(tmp_path / "out") / "certificate.html").read_text()


def test_one_cluster_given_as_both_sides_is_refused(
    empty: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # two seeds of one cluster: compared with itself it agreed on every key, and a verification certified it
    load(empty, "k", 50)
    source = json.dumps({"url": empty.url(), "topology": "cluster"})
    target = json.dumps({"url": empty.url(empty.masters[1]), "topology": "cluster"})
    args = ["verify", "--source", source, "--target", target, "-o", str(tmp_path / "out")]
    assert run_cli(args, monkeypatch) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "both endpoints reach one server (shard masters' run_ids" in err and PASSWORD not in err, err


# --- bad input -------------------------------------------------------------------------------------------------


def test_cluster_topology_on_a_plain_server_is_a_usage_error(
    standalone: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pair = {"name": "nocluster", "kind": "redis", "master": {"url": standalone.url, "topology": "cluster"}}
    code, _ = audit(tmp_path, monkeypatch, [pair])
    assert code == 2
    assert "not in cluster mode" in capsys.readouterr().err


def test_a_cluster_node_as_the_plain_side_of_a_migration_is_a_usage_error(
    empty: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # read alone, the node held one shard's keys; the recheck's MOVED replies for the others were taken
    # as "converged", and a migration whose source held a third of the target's keys passed (exit 0)
    cluster = empty
    load(cluster, "one-node", 300)
    pair = {**migration_pair(RedisServer(cluster.masters[0].port, tmp_path), cluster), "master": cluster.url()}
    code, _ = audit(tmp_path, monkeypatch, [pair])
    assert code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "redis_mode:cluster" in err and "topology: cluster" in err and PASSWORD not in err


def test_resharding_during_the_audit_is_followed(
    empty: LocalCluster, standalone: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slot half migrated: the replication audit reports it (info), the migration audit reads each key
    where it is (ASK followed), and neither reports a key missing."""
    cluster = empty
    keys = [b"{mig}:%d" % i for i in range(20)]
    src_client, cc = standalone.client(), cluster.cluster_client()
    for k in keys:
        cc.set(k, k)
        src_client.set(k, k)
    slot = key_slot(keys[0])
    src = master_of(cluster, keys[0])
    dst = cluster.masters[(cluster.masters.index(src) + 1) % 3]
    s_cli, d_cli = cluster.node(src), cluster.node(dst)
    d_cli.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", cluster.node_id(src))
    s_cli.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", cluster.node_id(dst))
    try:
        s_cli.execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "AUTH", PASSWORD, "KEYS", *keys[:10])
        cluster.wait_all_in_sync()
        code, run = audit(tmp_path / "repl", monkeypatch, [cluster_pair(cluster, fleet_snapshot="threads")])
        cats = sorted(r["category"] for r in findings(run))
        assert (code, cats) == (0, ["slot_migration", "slot_migration"])
        code, run = audit(tmp_path / "move", monkeypatch, [migration_pair(standalone, cluster, "resharding")])
        assert [r["category"] for r in findings(run) if r["check"] == "keyspace"] == []
        assert code == 0
    finally:
        s_cli.execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "AUTH", PASSWORD, "KEYS", *keys[10:])
        for m in cluster.masters:
            cluster.node(m).execute_command("CLUSTER", "SETSLOT", slot, "NODE", cluster.node_id(dst))
        cluster.wait_healthy()


def test_keys_moved_out_of_a_shard_mid_snapshot_converge_not_unreadable(
    empty: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slot's keys migrated after the shard's master was read and before its replica was: the replica
    lacks them, and the recheck's reads on the master answer ASK. They were counted as unreadable, and a
    resharding failed the gate (exit 1, "20 differing keys could not be re-read live"). The master's ASK
    says it no longer holds them: absent on both nodes, they converge (no finding)."""
    import audit.sources.redis.fleet_snapshot as fleet_snapshot

    cluster = empty
    keys = [b"{moving}:%d" % i for i in range(40)]
    cc = cluster.cluster_client()
    for k in keys:
        cc.set(k, k)
    cluster.wait_all_in_sync()
    slot = key_slot(keys[0])
    src = master_of(cluster, keys[0])
    dst = cluster.masters[(cluster.masters.index(src) + 1) % 3]
    s_cli, d_cli = cluster.node(src), cluster.node(dst)
    real = fleet_snapshot.run_task
    moved: list[bytes] = []

    def migrate_before_the_replica(task: Any, *args: Any, **kwargs: Any) -> Any:
        if task.side != "master" and task.shard == addr(src) and not moved:
            d_cli.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", cluster.node_id(src))
            s_cli.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", cluster.node_id(dst))
            s_cli.execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "AUTH", PASSWORD, "KEYS", *keys[:20])
            moved.extend(keys[:20])
            cluster.wait_all_in_sync()
        return real(task, *args, **kwargs)

    monkeypatch.setattr(fleet_snapshot, "run_task", migrate_before_the_replica)
    try:
        pair = cluster_pair(cluster, fleet_snapshot="threads", fleet_threads=1)  # the shard's two reads in turn
        code, run = audit(tmp_path, monkeypatch, [pair])
        assert moved and findings(run) == []
        m = summary(run)["pairs"][0]["metrics"]
        assert (m["recheck_unreadable"], m["recheck_converged"], m["recheck_candidates"]) == (0, 20, 20)
        assert code == 0
    finally:
        if moved:
            s_cli.execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "AUTH", PASSWORD, "KEYS", *keys[20:])
            for m in cluster.masters:
                cluster.node(m).execute_command("CLUSTER", "SETSLOT", slot, "NODE", cluster.node_id(dst))
        cluster.wait_healthy()


def test_uncovered_slots_and_clusterdown_are_reported(
    empty: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = empty
    load(cluster, "down", 100)
    owner = cluster.masters[2]
    hi = 16383
    lo = hi - 9
    try:
        _uncover(cluster, owner, lo, hi)
        code, run = audit(tmp_path, monkeypatch, [cluster_pair(cluster, fleet_snapshot="threads")])
        got = {r["category"]: r for r in findings(run)}
        assert {"uncovered_slots", "cluster_down"} <= set(got)
        assert (got["uncovered_slots"]["start_num"], got["uncovered_slots"]["end_num"]) == (lo, hi)
        assert code == 1
        s = summary(run)["pairs"][0]
        assert s["gate"]["success"] is False and s["counts"]["cluster_down"] == 1
    finally:
        with contextlib.suppress(redis.ResponseError):  # "busy": it never let them go (a failure above)
            cluster.node(owner).execute_command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
        _wait_state(cluster, "ok")


def _uncover(cluster: LocalCluster, owner: RedisServer, lo: int, hi: int) -> None:
    """Leave slots lo..hi without an owner on every node, until every node says the cluster failed.

    The owner forgets them first, as any other node that forgets them before it would learn them
    back from the owner's next ping. A ping already on its way can still do that, so a node still
    `ok` is told again, and every node must say `fail` twice, 0.2 s apart (a node recomputes its
    state only before it next sleeps)."""

    def forget(nodes: list[RedisServer]) -> None:
        for node in nodes:
            with contextlib.suppress(redis.ResponseError):  # "already unassigned"
                cluster.node(node).execute_command("CLUSTER", "DELSLOTSRANGE", lo, hi)

    def still_ok() -> list[RedisServer]:
        return [n for n in cluster.nodes if b"cluster_state:ok" in cluster.node(n).execute_command("CLUSTER", "INFO")]

    forget([owner] + [n for n in cluster.nodes if n is not owner])
    deadline, failed_before = time.time() + 30, False
    while time.time() < deadline:
        healthy = still_ok()
        if not healthy and failed_before:
            return
        failed_before = not healthy
        forget(healthy)
        time.sleep(0.2)
    raise AssertionError("cluster_state did not become fail")


def _wait_state(cluster: LocalCluster, state: str) -> None:
    deadline = time.time() + 30
    while time.time() < deadline:
        infos = [cluster.node(n).execute_command("CLUSTER", "INFO").decode() for n in cluster.nodes]
        if all(f"cluster_state:{state}" in i for i in infos):
            return
        time.sleep(0.05)
    raise AssertionError(f"cluster_state did not become {state}")


def test_an_unreachable_node_is_named_and_the_other_shards_audited(
    empty: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = empty
    keys = load(cluster, "gone", 300)
    gone = cluster.replicas[2][0]
    healthy = next(k for i, k in enumerate(keys) if i % 3 and master_of(cluster, k) == cluster.masters[0])
    plant(cluster, healthy, "SET", healthy, "diverged")
    gone.stop()
    try:
        code, run = audit(tmp_path, monkeypatch, [cluster_pair(cluster, fleet_snapshot="threads")])
        assert code == 3
        err = capsys.readouterr().err
        assert addr(gone) in err and PASSWORD not in err
        keyspace = [r for r in findings(run) if r["check"] == "keyspace"]
        assert [(bytes(r["key"]), r["category"]) for r in keyspace] == [(healthy, "value_mismatch")]
        s = summary(run)["pairs"][0]
        assert s["status"] == "error" and any(addr(gone) in n for n in s["not_covered"])
    finally:
        cluster.restart(gone)
        cluster.wait_healthy(60)
        c = cluster.cluster_client()
        c.set(healthy, b"x")
        c.delete(healthy)


def test_migration_into_a_cluster_with_a_node_down_compares_the_other_shards(
    empty: LocalCluster,
    standalone: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster = empty
    src, dst = standalone.client(), cluster.cluster_client()
    for i in range(300):
        src.set(f"k:{i}", i)
        dst.set(f"k:{i}", i)
    down = cluster.masters[1]
    changed = next(f"k:{i}".encode() for i in range(300) if master_of(cluster, f"k:{i}".encode()) != down)
    dst.set(changed, "other")
    for node in cluster.nodes:  # the other shards keep serving while one master is away
        cluster.node(node).config_set("cluster-require-full-coverage", "no")
    down.stop()
    pair = migration_pair(standalone, cluster)
    try:
        code, run = audit(tmp_path, monkeypatch, [pair])
        assert code == 3
        assert addr(down) in capsys.readouterr().err
        keyspace = [(bytes(r["key"]), r["category"]) for r in findings(run) if r["check"] == "keyspace"]
        assert keyspace == [(changed, "value_mismatch")]  # the down shard's keys are not "missing"
        s = summary(run)["pairs"][0]
        assert s["metrics"]["keys_in_unread_shards"] > 0 and s["status"] == "error"
    finally:
        cluster.restart(down)
        cluster.wait_healthy(60)
        for node in cluster.nodes:
            cluster.node(node).config_set("cluster-require-full-coverage", "yes")


def _snapshot_stage(
    cluster: LocalCluster, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, str, str]:
    """A loaded cluster's snapshot stage alone, as an Airflow task runs it: (inventory, out, run id)."""
    load(cluster, prefix, 100)
    inv = write_inventory(tmp_path / "inv.yaml", [cluster_pair(cluster, fleet_snapshot="threads")], **FAST)
    out = str(tmp_path / "out")
    assert run_cli(["snapshot", "-i", str(inv), "-o", out], monkeypatch) == 0
    return inv, out, latest_run(tmp_path / "out").name


def _later_stages(inv: Path, out: str, run_id: str, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The diff and recheck stages' exit codes, each run apart on the snapshot's run id."""
    return [run_cli([st, "-i", str(inv), "-o", out, "--run-id", run_id], monkeypatch) for st in ("diff", "recheck")]


def test_a_replica_lost_between_the_stages_is_not_a_pass(
    empty: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Airflow runs the stages as tasks, minutes apart: a replica read by the snapshot and down at `diff`
    # was left out of the replication sampling without a word, and the pair passed (exit 0)
    cluster = empty
    inv, out, run_id = _snapshot_stage(cluster, "later", tmp_path, monkeypatch)
    gone = cluster.replicas[1][0]
    gone.stop()
    try:
        assert _later_stages(inv, out, run_id, monkeypatch) == [0, 3]
        err = capsys.readouterr().err
        assert addr(gone) in err and "replication not sampled" in err and PASSWORD not in err
        assert run_cli(["report", "-i", str(inv), "-o", out, "--run-id", run_id], monkeypatch) == 3
        s = summary(latest_run(tmp_path / "out"))["pairs"][0]
        assert s["status"] == "error" and s["metrics"]["replicas_unsampled"] == 1
    finally:
        cluster.restart(gone)
        cluster.wait_healthy(60)


def _fail_over(cluster: LocalCluster, to: RedisServer, old: RedisServer) -> None:
    """CLUSTER FAILOVER on replica `to` (its master `old`), until both report their new roles. A manual
    failover gives up silently after 5 s (a replica still syncing): it is asked again until done."""
    cluster.wait_in_sync(old, to, 60)
    deadline = time.time() + 60
    asked = 0.0
    while time.time() < deadline:
        if time.time() - asked > 6:
            cluster.node(to).execute_command("CLUSTER", "FAILOVER")  # type: ignore[no-untyped-call]
            asked = time.time()
        roles = (cluster.node(to).info("replication")["role"], cluster.node(old).info("replication")["role"])
        if roles == ("master", "slave"):
            return
        time.sleep(0.05)
    raise AssertionError(f"{addr(to)} did not take over from {addr(old)}")


def test_a_failover_between_the_stages_is_not_a_pass(
    empty: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the recheck read the nodes in the roles the snapshot found: after a failover the old master's reads
    # answered MOVED (taken for a slot migration, "converged"), and the pair passed
    cluster = empty
    inv, out, run_id = _snapshot_stage(cluster, "fo", tmp_path, monkeypatch)
    old, new = cluster.masters[0], cluster.replicas[0][0]
    _fail_over(cluster, new, old)
    try:
        assert _later_stages(inv, out, run_id, monkeypatch) == [0, 3]
        err = " ".join(capsys.readouterr().err.split())
        assert "roles changed during the audit" in err and f"{addr(old)} is now a replica" in err
    finally:
        _fail_over(cluster, old, new)
        cluster.wait_healthy(60)


def test_a_failover_while_the_recheck_reads_the_keys_is_not_a_gate_failure(
    empty: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the roles were read once, as the recheck started: a failover while it read the keys left the old
    # master's reads answering MOVED, "1 differing keys could not be re-read live", exit 1 (the gate),
    # with no word of the failover
    import audit.sources.redis.recheck as recheck_module

    cluster = empty
    keys = load(cluster, "mid", 300)
    old, new = cluster.masters[0], cluster.replicas[0][0]
    planted = next(k for i, k in enumerate(keys) if i % 3 and master_of(cluster, k) == old)
    plant(cluster, planted, "SET", planted, "diverged")
    real = recheck_module.read_keys

    def fail_over_first(reader: Any, keys: Any, pacer: Any = None) -> Any:
        if cluster.node(old).info("replication")["role"] == "master":
            _fail_over(cluster, new, old)
        return real(reader, keys, pacer)

    monkeypatch.setattr(recheck_module, "read_keys", fail_over_first)
    try:
        code, run = audit(tmp_path, monkeypatch, [cluster_pair(cluster, fleet_snapshot="threads")])
        assert code == 3
        err = " ".join(capsys.readouterr().err.split())
        assert "roles changed during the audit" in err and f"{addr(old)} is now a replica" in err
        assert summary(run)["pairs"][0]["status"] == "error"
    finally:
        _fail_over(cluster, old, new)
        cluster.wait_healthy(60)
        c = cluster.cluster_client()
        c.set(planted, b"x")
        c.delete(planted)


def test_a_source_lost_mid_recheck_of_a_migration_is_named(
    empty: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the fleet's recheck said only "recheck failed: Connection reset by peer" (or refused), naming no server
    import audit.sources.redis.recheck as recheck_module

    source = RedisServer(free_port(), tmp_path / "source").start()
    try:
        keys = load(empty, "moved", 30)
        src = source.client()
        for k in keys:
            src.set(k, b"same")
        real = recheck_module.read_keys

        def lose_the_source(reader, keys, pacer=None):  # type: ignore[no-untyped-def]
            source.stop()  # the source goes away as the recheck starts reading
            return real(reader, keys, pacer)

        monkeypatch.setattr(recheck_module, "read_keys", lose_the_source)
        code, root = audit(tmp_path, monkeypatch, [migration_pair(source, empty)])
        assert code == 3
        err = " ".join(capsys.readouterr().err.split())
        assert "recheck failed" in err and f"; master {addr(source)} unreachable" in err
        assert PASSWORD not in err and "Traceback" not in err
        assert summary(root)["pairs"][0]["error"]["stage"] == "recheck"
    finally:
        source.stop()
