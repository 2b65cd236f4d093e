"""Servers set up as production ones are: idle clients closed (`timeout`), against real redis-server pairs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from audit.local.redis_server import RedisServer, free_port, start_pair, wait_in_sync, wait_link_up
from audit.local.sample import load_sample, plant_divergences
from tests.integration.helpers import findings, latest_run, run_cli, summary, write_inventory

pytestmark = pytest.mark.integration


def test_idle_clients_closed_by_timeout_between_recheck_rounds_do_not_end_the_audit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `timeout 1` closes a client idle for a second; the recheck's pipes wait `recheck_interval_s` (2 s by
    # default) between rounds, and without a replication stream to wait on (a migration) every difference
    # takes all the rounds: the server had closed both pipes by the second round, and the audit ended
    # "recheck failed: server closed the connection", the planted divergences unreported
    master, replica = start_pair(tmp_path / "s", replica_extra=["--timeout", "1"])
    try:
        master.client().config_set("timeout", "1")
        load_sample(master.client(), n_keys=2000, big_hash_fields=3000)
        wait_in_sync(master, replica)
        planted = plant_divergences(replica.client())
        pair = {"name": "p", "kind": "redis", "master": master.url, "replica": replica.url, "check_replication": False}
        inv = write_inventory(tmp_path / "inv.yaml", [pair], recheck_interval_s=2.0, big_key_elements=1000)
        assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 1
        root = latest_run(tmp_path / "out")
        assert {(f["category"], f["key"]) for f in findings(root)} == {(p.category, p.key) for p in planted}
        assert summary(root)["pairs"][0]["status"] == "failed"
    finally:
        replica.stop()
        master.stop()


def test_a_replica_that_drops_the_auditor_for_its_output_buffer_limit_says_so_and_smaller_batches_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # managed services cap a normal client's pending replies; the snapshot keeps three batches in flight
    # (1000 keys, value pages of 10k elements), past 64 kB here: the replica drops the connection. The
    # error said "Connection reset by peer" and nothing about the limit, or what to lower
    limit = ["--client-output-buffer-limit", "normal 64kb 32kb 1"]
    master, replica = start_pair(tmp_path / "s", replica_extra=limit)
    try:
        load_sample(master.client(), n_keys=5000, big_hash_fields=3000)
        wait_in_sync(master, replica)
        planted = plant_divergences(replica.client())
        pair = {"name": "p", "kind": "redis", "master": master.url, "replica": replica.url}
        inv = write_inventory(tmp_path / "inv.yaml", [pair])
        assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 3
        err = " ".join(capsys.readouterr().err.split())
        assert f"replica {replica.url}: snapshot interrupted" in err and "client-output-buffer-limit normal" in err
        small = write_inventory(tmp_path / "small.yaml", [pair], scan_count=50, big_key_elements=100)
        assert run_cli(["run", "-i", str(small), "-o", str(tmp_path / "out2")], monkeypatch) == 1
        root = latest_run(tmp_path / "out2")
        assert {(f["category"], f["key"]) for f in findings(root)} == {(p.category, p.key) for p in planted}
    finally:
        replica.stop()
        master.stop()


def test_an_idle_healthy_pair_with_a_long_ping_period_is_not_lagging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a master with no writes only pings its replicas every `repl-ping-replica-period` (10 s by default,
    # some raise it); `master_last_io_seconds_ago` then climbs to it on a replica that holds every write.
    # Taken as the lag in seconds it failed the gate ("lagging", lag_seconds 8 > 5) with a lag of 0 bytes
    master, replica = start_pair(tmp_path / "s")
    try:
        m = master.client()
        m.config_set("repl-ping-replica-period", "60")
        m.set("k", "v")
        wait_in_sync(master, replica)
        r = replica.client()
        while int(r.info("replication")["master_last_io_seconds_ago"]) < 7:
            time.sleep(0.2)
        pair = {"name": "p", "kind": "redis", "master": master.url, "replica": replica.url}
        pair["gate"] = {"max_lag_seconds": 5}
        inv = write_inventory(tmp_path / "inv.yaml", [pair])
        assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 0
        s = summary(latest_run(tmp_path / "out"))["pairs"][0]
        assert s["status"] == "passed" and s["metrics"]["lag_seconds"] == 0
    finally:
        replica.stop()
        master.stop()


def test_a_replica_with_fewer_databases_than_its_master_is_a_source_error_not_an_inventory_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the master has `databases 64` and keys in db 40; the replica, left at 16, refuses the stream's
    # SELECT 40 (and applies the writes that follow to the db it had). The dbs came from INFO keyspace,
    # not from the inventory, yet the audit ended exit 2, "dbs: db 40: the server has no such db": an
    # operator's mistake in an inventory that names no db
    master = RedisServer(free_port(), tmp_path / "m", ["--databases", "64"]).start()
    replica = RedisServer(free_port(), tmp_path / "r", ["--replicaof", "127.0.0.1", str(master.port)]).start()
    try:
        wait_link_up(replica)
        master.client(0).set("in-db-0", "v")
        master.client(40).set("in-db-40", "v")
        wait_in_sync(master, replica)
        pair = {"name": "p", "kind": "redis", "master": master.url, "replica": replica.url}
        inv = write_inventory(tmp_path / "inv.yaml", [pair])
        assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 3
        err = " ".join(capsys.readouterr().err.split())
        assert f"replica {replica.url}: dbs: db 40: the server has no such db" in err
        assert "fewer databases than" in err
    finally:
        replica.stop()
        master.stop()
