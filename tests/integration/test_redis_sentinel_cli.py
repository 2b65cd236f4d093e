"""Kind redis over a Sentinel-managed group, end to end through the CLI: a real master, its replica and a
sentinel watching them, shared by the module."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.local.redis_sentinel import SentinelGroup, SentinelServer, start_sentinel_group
from audit.local.redis_server import RedisServer, free_port, wait_acked, wait_in_sync, wait_link_up
from tests.integration.helpers import findings, latest_run, run_cli, summary, write_inventory

pytestmark = pytest.mark.integration

UNREPLICATED = "redis.set_repl(redis.REPL_NONE); return redis.call(unpack(ARGV))"


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelGroup]:
    g = start_sentinel_group(Path(tmp_path_factory.mktemp("sentinel")))
    yield g
    g.stop()


def sentinel_pair(group: SentinelGroup, service: str | None = None) -> dict[str, Any]:
    master = {"sentinels": ["127.0.0.1:1", *group.sentinel_addresses], "service": service or group.service}
    return {"name": "ha-cache", "kind": "redis", "master": master, "fleet_snapshot": "threads"}


def audit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pair: dict[str, Any]) -> tuple[int, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    inv = write_inventory(tmp_path / "inv.yaml", [pair], recheck_interval_s=0.2, recheck_rounds=2)
    code = run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch)
    return code, latest_run(tmp_path / "out")


def test_sentinel_group_healthy_under_writes_then_a_planted_divergence(
    group: SentinelGroup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = group.master.client()
    for db in (0, 2):
        m.execute_command("SELECT", db)
        for i in range(500):
            m.set(f"k:{i}", i)
    m.execute_command("SELECT", 0)
    wait_acked(group.master, group.replica)  # else the master may still list it at offset 0 (an info finding)
    stop = threading.Event()

    def writer() -> None:
        c = group.master.client()
        i = 0
        while not stop.is_set():
            c.set(f"k:{i % 500}", i)
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        code, run = audit(tmp_path / "calm", monkeypatch, sentinel_pair(group))
    finally:
        stop.set()
        t.join()
    assert (code, findings(run)) == (0, [])
    s = summary(run)["pairs"][0]
    assert s["dbs"] == [0, 2] and s["coverage"]["master_keys"] == 1000
    assert any(f"sentinel service {group.service}" in n for n in s["notes"])

    group.master.client().eval(UNREPLICATED, 0, "SET", "only-on-master", "x")
    try:
        code, run = audit(tmp_path / "planted", monkeypatch, sentinel_pair(group))
    finally:
        group.master.client().delete("only-on-master")
    assert code == 1
    (row,) = findings(run)
    detail = json.loads(row["detail"])
    assert (bytes(row["key"]), row["category"]) == (b"only-on-master", "missing_on_replica")
    assert detail["shard"] == f"127.0.0.1:{group.master.port}"
    assert detail["replica_node"] == f"127.0.0.1:{group.replica.port}"
    assert isinstance(detail["replica"], dict)  # what the replica holds, not its address


def test_unknown_service_names_the_sentinels(
    group: SentinelGroup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = audit(tmp_path, monkeypatch, sentinel_pair(group, service="nosuch"))
    assert code == 3
    err = capsys.readouterr().err
    assert "'nosuch'" in err and group.sentinel_addresses[0] in err


def test_a_db_only_the_replica_holds_is_compared(
    group: SentinelGroup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the dbs came from the master's INFO keyspace alone: keys a replica held in a db its master had
    # none in were never read, and the pair passed (a standalone pair reads the dbs either side has)
    group.master.client().set("k", "v")
    wait_acked(group.master, group.replica)
    r = group.replica.client(db=5)
    r.config_set("replica-read-only", "no")
    r.set("stray", "x")
    try:
        code, run = audit(tmp_path, monkeypatch, sentinel_pair(group))
        assert code == 1
        assert [(row["db"], bytes(row["key"]), row["category"]) for row in findings(run)] == [
            (5, b"stray", "extra_on_replica")
        ]
        assert 5 in summary(run)["pairs"][0]["dbs"]
    finally:
        r.delete("stray")
        r.config_set("replica-read-only", "yes")
        group.master.client().delete("k")


def test_a_service_without_any_replica_is_not_a_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a replication audit with no replica to compare compared nothing, and passed (exit 0)
    master = RedisServer(free_port(), tmp_path / "solo").start()
    sentinel = SentinelServer(free_port(), tmp_path / "sentinel", {"solo": master.port})
    try:
        master.client().mset({f"k:{i}": i for i in range(20)})
        sentinel.start()
        pair = {"name": "solo", "kind": "redis", "master": {"sentinels": [sentinel.address], "service": "solo"}}
        code, run = audit(tmp_path / "a", monkeypatch, {**pair, "fleet_snapshot": "threads"})
        assert code == 1
        s = summary(run)["pairs"][0]
        assert s["status"] == "failed" and s["metrics"]["shards_without_replica"] == 1
        assert any("no replica" in n for n in s["not_covered"])
    finally:
        sentinel.stop()
        master.stop()


def test_a_replica_repointed_mid_audit_is_no_key_finding(
    group: SentinelGroup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # REPLICAOF another server between discovery and the keyspace snapshot: the recheck took the other
    # server's replication offset, further on, for an ack of this master's, and "confirmed live" every
    # key of both servers as missing or extra (600 findings) beside the exit 3 that said what happened
    import audit.sources.redis.fleet_keyspace_check as keyspace

    group.master.client().mset({f"k:{i}": i for i in range(300)})
    wait_acked(group.master, group.replica)
    other = RedisServer(free_port(), tmp_path / "other", ["--repl-diskless-sync-delay", "0"]).start()
    other.client().mset({f"o:{i}": i for i in range(300)})
    real = keyspace.snapshot_fleet

    def repoint_first(*args: Any, **kwargs: Any) -> Any:
        group.replica.client().replicaof("127.0.0.1", other.port)
        wait_link_up(group.replica)
        other.client().set("pad", "x" * 100_000)  # the other stream's offset well past this master's
        wait_in_sync(other, group.replica)
        return real(*args, **kwargs)

    monkeypatch.setattr(keyspace, "snapshot_fleet", repoint_first)
    try:
        code, run = audit(tmp_path / "a", monkeypatch, sentinel_pair(group))
        assert code == 3
        err = " ".join(capsys.readouterr().err.split())
        assert "roles changed during the audit" in err and f"replica 127.0.0.1:{group.replica.port}" in err
        assert [r for r in findings(run) if r["check"] == "keyspace"] == []
    finally:
        group.replica.client().replicaof("127.0.0.1", group.master.port)
        wait_link_up(group.replica)
        other.stop()
        group.master.client().flushall()
        wait_acked(group.master, group.replica)


def _promoted(sentinel: SentinelServer, service: str, port: int) -> None:
    """Until the sentinel names the server on `port` as the service's master."""
    deadline = time.time() + 30
    while time.time() < deadline:
        master = sentinel.client().execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", service)
        if master and int(master[1]) == port:
            return
        time.sleep(0.05)
    raise AssertionError(f"sentinel {sentinel.address} did not promote 127.0.0.1:{port}")


def test_a_failover_during_the_recheck_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # SENTINEL FAILOVER while the keyspace was re-read: the sentinel closed the old master's clients and
    # the pair ended with "recheck failed: server closed the connection", naming no node and no failover
    import audit.sources.redis.recheck as recheck_module

    own = start_sentinel_group(tmp_path / "group")  # its roles are swapped for good: not the module's group
    try:
        own.master.client().mset({f"k:{i}": i for i in range(100)})
        wait_acked(own.master, own.replica)
        own.master.client().eval(UNREPLICATED, 0, "SET", "k:1", "diverged")  # a candidate to re-read
        real = recheck_module.read_keys

        def fail_over_first(reader: Any, keys: Any, pacer: Any = None) -> Any:
            if own.master.client().info("replication")["role"] == "master":
                own.sentinels[0].client().execute_command("SENTINEL", "FAILOVER", own.service)
                _promoted(own.sentinels[0], own.service, own.replica.port)
            return real(reader, keys, pacer)

        monkeypatch.setattr(recheck_module, "read_keys", fail_over_first)
        pair = {**sentinel_pair(own), "master": {"sentinels": own.sentinel_addresses, "service": own.service}}
        code, run = audit(tmp_path / "a", monkeypatch, pair)
        assert code == 3
        err = " ".join(capsys.readouterr().err.split())
        assert "roles changed during the audit (a failover?)" in err and "Traceback" not in err
        assert f"127.0.0.1:{own.master.port}" in err
        assert summary(run)["pairs"][0]["status"] == "error"
    finally:
        own.stop()
