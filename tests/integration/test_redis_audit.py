"""End to end against real redis-server pairs on loopback: every detector, no false positives, bad input."""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time
from pathlib import Path

import pytest

from audit.local.mariadb_server import MariaDBServer, mariadb_available
from audit.local.redis_server import RedisServer, free_port, start_pair, wait_in_sync
from audit.local.sample import load_sample, plant_divergences
from tests.integration.helpers import findings, latest_run, run_cli, summary, write_inventory

pytestmark = pytest.mark.integration


def pair_entry(name: str, master: RedisServer, replica: RedisServer, **extra: object) -> dict[str, object]:
    return {"name": name, "kind": "redis", "master": master.url, "replica": replica.url, **extra}


def test_planted_divergences_found_and_nothing_else(fresh_pair, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    master, replica = fresh_pair
    load_sample(master.client(), n_keys=5000, big_hash_fields=30_000)
    wait_in_sync(master, replica)
    planted = plant_divergences(replica.client())
    # page 1000 < 30k fields: the big hash is streamed in HSCAN pages, not read whole
    inv = write_inventory(tmp_path / "inv.yaml", [pair_entry("p", master, replica)], big_key_elements=1000)
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 1
    root = latest_run(tmp_path / "out")
    got = {(f["category"], f["key"]) for f in findings(root)}
    assert got == {(p.category, p.key) for p in planted}
    s = summary(root)["pairs"][0]
    assert s["status"] == "failed" and s["coverage"]["keys_compared"] >= 5000
    failed_columns = {f["column"] for f in s["gate"]["failed"]}
    assert {"missing_on_replica", "extra_on_replica", "value_mismatch", "type_mismatch"} <= failed_columns
    ttl = next(f for f in findings(root) if f["category"] == "ttl_mismatch")
    assert abs(json.loads(ttl["detail"])["ttl_delta_ms"] - 600_000) < 2000  # ten minutes, give or take read skew
    for name in ("manifest.json", "summary.json", "report.html", "metrics.parquet", "gate"):
        assert (root / name).exists(), name
    assert (root / "snapshots" / "p" / "master" / "snapshot.json").exists()


def test_empty_streams_are_compared(fresh_pair, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # XRANGE of an empty stream and of a missing key both answer []: an empty stream is still a key
    master, replica = fresh_pair
    m = master.client()
    m.set("plain", "1")
    for name in ("both", "gone-on-replica"):
        m.xgroup_create(name, "g", id="$", mkstream=True)
    wait_in_sync(master, replica)
    r = replica.client()
    r.config_set("replica-read-only", "no")
    r.delete("gone-on-replica")
    r.xgroup_create("only-on-replica", "g", id="$", mkstream=True)
    inv = write_inventory(tmp_path / "inv.yaml", [pair_entry("p", master, replica)])
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 1
    root = latest_run(tmp_path / "out")
    got = sorted((f["category"], f["key"]) for f in findings(root))
    assert got == [("extra_on_replica", b"only-on-replica"), ("missing_on_replica", b"gone-on-replica")]
    coverage = summary(root)["pairs"][0]["coverage"]
    assert coverage["keys_compared"] == 2 and coverage["master_keys_vanished"] == 0


def _writer(master: RedisServer, stop: threading.Event) -> None:
    c = master.client()
    rnd = random.Random(1)
    while not stop.is_set():
        k = b"hot:%d" % rnd.randint(0, 500)
        op = rnd.random()
        if op < 0.5:
            c.set(k, rnd.randbytes(16), px=rnd.randint(20_000, 60_000))
        elif op < 0.7:
            c.delete(k)
            c.hset(k, b"f%d" % rnd.randint(0, 9), b"%d" % rnd.randint(0, 9))
        elif op < 0.85:
            c.delete(k)
        else:
            c.set(k, b"short", px=rnd.randint(1, 200))  # expires during the audit
        time.sleep(0.0005)


def test_healthy_pair_under_concurrent_writes_has_no_findings(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # the replica keeps hashes as hashtable and the master as listpack: encodings must not matter
    master, replica = start_pair(tmp_path / "s", replica_extra=["--hash-max-listpack-entries", "1"])
    try:
        load_sample(master.client(), n_keys=20_000, big_hash_fields=20_000)
        wait_in_sync(master, replica)
        stop = threading.Event()
        writer = threading.Thread(target=_writer, args=(master, stop), daemon=True)
        writer.start()
        inv = write_inventory(tmp_path / "inv.yaml", [pair_entry("healthy", master, replica)], big_key_elements=500)
        try:
            code = run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch)
        finally:
            stop.set()
            writer.join()
        root = latest_run(tmp_path / "out")
        assert findings(root) == [], findings(root)[:5]
        assert code == 0
        assert summary(root)["pairs"][0]["status"] == "passed"
    finally:
        replica.stop()
        master.stop()


def _audit_db_beside_a_sync_client(master, replica, db, tmp_path, monkeypatch, replconf_after=True) -> tuple[int, Path]:  # type: ignore[no-untyped-def]
    """Audit one db of the pair through the CLI once the SYNC client is online and, if it sends one after
    the payload (`replconf_after`), has sent its REPLCONF.

    Online is not enough: until the master's BGSAVE for it ends, the client waits (`wait_bgsave`); once
    the master has sent the payload it reads `online`, but `redis-cli --replica` sends its one REPLCONF
    only when it has read the payload through, and that REPLCONF sets the lag back to 0. An audit whose
    two samples straddle it reads a lag of 0 twice, which the catalog rightly does not call
    REDIS_SYNC_NO_ACK yet. Under a loaded suite the REPLCONF came more than 1.5 s after `online`, so
    the wait is for the client's last command to be no longer SYNC (CLIENT LIST; the pair's own replica
    shows REPLCONF or PSYNC, never SYNC), not a time; and then for the entry's lag to have grown to 1 s
    at least, as the audit will need it to go on growing (a loaded CI run once read 0 twice, 3 s apart,
    after a fixed 1.5 s sleep had passed).
    """
    deadline = time.monotonic() + 60
    conn = master.client(0)

    def ready() -> bool:
        # CLIENT LIST before INFO: a lag read before the REPLCONF may be 1 already (redis-cli waits a
        # second before it sends it), and the REPLCONF then sets it back to 0
        if replconf_after and any(c.get("cmd") == "sync" for c in conn.client_list(_type="replica")):
            return False
        return any(
            isinstance(e, dict) and e.get("offset") == 0 and e.get("state") == "online" and int(e.get("lag", 0)) >= 1
            for e in conn.info("replication").values()
        )

    while not ready():
        assert time.monotonic() < deadline, (
            "the SYNC client never came online, sent its REPLCONF and showed a growing lag: "
            f"{conn.info('replication')} {conn.client_list(_type='replica')}"
        )
        time.sleep(0.1)
    inv = write_inventory(tmp_path / "inv.yaml", [pair_entry("p", master, replica, dbs=[db])])
    code = run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch)
    return code, latest_run(tmp_path / "out")


def test_sync_replica_is_diagnosed_while_data_is_fine(redis_pair, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    master, replica = redis_pair
    master.client(5).set("x", "1")
    wait_in_sync(master, replica)
    sync = subprocess.Popen(
        ["redis-cli", "-p", str(master.port), "--replica"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        code, root = _audit_db_beside_a_sync_client(master, replica, 5, tmp_path, monkeypatch)
    finally:
        sync.terminate()
    [f] = findings(root)
    assert (f["category"], f["diagnosis"]) == ("lag_metric_unreliable", "REDIS_SYNC_NO_ACK"), f["detail"]
    # 1.1 s apart, a loaded run once read the same whole-second lag twice: no diagnosis
    assert json.loads(f["detail"])["sample_interval_ms"] >= 3000
    assert code == 0  # the lag figure is unreliable, the data is not: the gate passes
    assert "REDIS_SYNC_NO_ACK" in summary(root)["pairs"][0]["diagnoses"]


def test_unreachable_server_exits_3_and_other_pairs_are_audited(redis_pair, tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    master, replica = redis_pair
    dead = f"redis://127.0.0.1:{free_port()}"
    inv = write_inventory(
        tmp_path / "inv.yaml",
        [
            {"name": "down", "kind": "redis", "master": master.url, "replica": dead},
            pair_entry("up", master, replica, dbs=[6]),
        ],
    )
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 3
    err = capsys.readouterr().err
    assert dead.removeprefix("redis://") in err and "Traceback" not in err
    pairs = {p["pair"]: p for p in summary(latest_run(tmp_path / "out"))["pairs"]}
    assert pairs["down"]["status"] == "error" and pairs["up"]["status"] == "passed"


def test_malformed_inventory_exits_2_naming_the_field(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        "pairs:\n  - {name: p, kind: redis, master: 'redis://h:1', replica: 'redis://h:2', gate: {max_missing: many}}\n"
    )
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 2
    err = capsys.readouterr().err
    assert "pairs[0] (p).gate.max_missing" in err and "Traceback" not in err
    assert run_cli(["run", "-i", str(tmp_path / "nope.yaml"), "-o", str(tmp_path)], monkeypatch) == 2


def test_replica_of_another_master_is_not_diffed(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    master, replica = start_pair(tmp_path / "a")
    stranger = RedisServer(free_port(), tmp_path / "b").start()
    try:
        inv = write_inventory(tmp_path / "inv.yaml", [pair_entry("p", stranger, replica)])
        assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 1
        root = latest_run(tmp_path / "out")
        [f] = findings(root)
        assert f["category"] == "wrong_master" and f"127.0.0.1:{master.port}" in f["detail"]
        assert "keyspace" in summary(root)["pairs"][0]["skipped_checks"]
    finally:
        for s in (replica, master, stranger):
            s.stop()


def test_a_command_the_server_refuses_while_scanning_names_the_server(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # an ACL user without SCAN: "could not be audited: SCAN in db 0 failed: NOPERM ...", no host named
    master, replica = start_pair(tmp_path / "s")
    try:
        for s in (master, replica):
            s.client().execute_command(
                "ACL", "SETUSER", "noscan", "on", ">pw", "+info", "+client|list", "+select", "+type", "allkeys"
            )
        master.client().set("k", "v")
        wait_in_sync(master, replica)
        urls = {side: f"redis://noscan:pw@127.0.0.1:{s.port}" for side, s in (("master", master), ("replica", replica))}
        inv = write_inventory(tmp_path / "inv.yaml", [{"name": "n", "kind": "redis", **urls}])
        assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out"), "--quiet"], monkeypatch) == 3
        err = " ".join(capsys.readouterr().err.split())
        assert "noscan:***@127.0.0.1:" in err and "SCAN in db 0 failed: NOPERM" in err
    finally:
        replica.stop()
        master.stop()


@pytest.mark.parametrize("snapshot_processes", [True, False])
def test_a_db_the_server_does_not_have_is_a_config_error_naming_it(
    snapshot_processes: bool, redis_pair, tmp_path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    # `dbs: [0, 20]` on a 16-db server ended "could not be audited: SELECT 20 failed: ERR DB index is out
    # of range", exit 3, naming neither the field nor the server
    master, replica = redis_pair
    pair = {"name": "d", "kind": "redis", "master": master.url, "replica": replica.url, "dbs": [0, 20]}
    inv = write_inventory(tmp_path / "inv.yaml", [pair], snapshot_processes=snapshot_processes)
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out"), "--quiet"], monkeypatch) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{master.url}: dbs: db 20: the server has no such db" in err or f"{replica.url}: dbs: db 20" in err


@pytest.mark.parametrize("check_replication", [True, False])
def test_a_conn_of_another_kinds_type_is_a_config_error_naming_the_side(
    check_replication: bool, tmp_path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    # a MySQL connection given to a Redis pair was "master 127.0.0.1:3306 unreachable: Redis URL must
    # specify one of the following schemes": exit 3, which Airflow retries, for an inventory mistake
    conn = {"conn_type": "replica_audit_mysql", "host": "127.0.0.1", "port": 1, "login": "u", "password": "Zq9pw"}
    monkeypatch.setenv("AIRFLOW_CONN_SHOP_DB", json.dumps(conn))
    pair = {"name": "c", "kind": "redis", "master": "conn:shop_db", "replica": "conn:shop_db"}
    inv = write_inventory(tmp_path / "inv.yaml", [{**pair, "check_replication": check_replication}])
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out"), "--quiet"], monkeypatch) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "mysql://u:***@127.0.0.1:1 is not a Redis URL" in err and "Zq9pw" not in err
    assert "Traceback" not in err


def test_a_conn_url_with_an_option_redis_py_does_not_take_is_a_config_error(
    redis_pair, tmp_path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    # AIRFLOW_CONN_<ID> as a URI reaches the client unchecked by the inventory: `?foo=1` was a TypeError
    # inside redis-py, "internal error (a bug in replica-audit)", exit 4 and a traceback
    master, replica = redis_pair
    monkeypatch.setenv("AIRFLOW_CONN_CACHE_M", f"redis://:Zq9pw@127.0.0.1:{master.port}/0?foo=1")
    inv = write_inventory(
        tmp_path / "inv.yaml", [{"name": "c", "kind": "redis", "master": "conn:cache_m", "replica": replica.url}]
    )
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out"), "--quiet"], monkeypatch) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"c master redis://:***@127.0.0.1:{master.port}/0: unknown URL option 'foo'" in err
    assert "Traceback" not in err and "Zq9pw" not in err


@pytest.mark.skipif(not mariadb_available(), reason="mariadbd not installed (apt-get install mariadb-server)")
@pytest.mark.parametrize("kind", ["redis", "pika"])
def test_a_server_that_is_not_redis_exits_3_naming_it(kind: str, tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # kind redis (or pika) pointed at a MariaDB port: "InvalidResponse: Protocol error, got "h" as reply
    # type byte", reported as a bug in replica-audit (exit 4) with redis-py's traceback
    server = MariaDBServer(free_port(), tmp_path / "mariadb").start()
    try:
        url = f"redis://:{server.password}@127.0.0.1:{server.port}"
        inv = write_inventory(tmp_path / "inv.yaml", [{"name": "m", "kind": kind, "master": url, "replica": url}])
        assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out"), "--quiet"], monkeypatch) == 3
        err = " ".join(capsys.readouterr().err.split())
        assert f"127.0.0.1:{server.port}: the server does not speak the Redis protocol" in err
        assert "Traceback" not in err and server.password not in err
    finally:
        server.stop()


def test_read_only_acl_user_by_url_or_conn_and_password_never_written(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    secret = "Zq9-very-secret"
    master, replica = start_pair(tmp_path / "s")
    try:
        for s in (master, replica):
            s.client().execute_command(
                "ACL", "SETUSER", "auditor", "on", f">{secret}", "+@read", "+info", "+client|list", "+select", "allkeys"
            )
        master.client().set("k", "v")
        wait_in_sync(master, replica)
        # the master as a URL; the replica as an Airflow connection, read outside Airflow from
        # AIRFLOW_CONN_<ID> in Airflow's JSON form (audit/connections.py), as the CLI does
        master_url = f"redis://auditor:{secret}@127.0.0.1:{master.port}"
        conn = {"conn_type": "redis", "host": "127.0.0.1", "port": replica.port, "login": "auditor"}
        monkeypatch.setenv("AIRFLOW_CONN_RO_REPLICA", json.dumps({**conn, "password": secret}))
        inv = write_inventory(
            tmp_path / "inv.yaml", [{"name": "ro", "kind": "redis", "master": master_url, "replica": "conn:ro_replica"}]
        )
        assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 0
        pair = summary(latest_run(tmp_path / "out"))["pairs"][0]
        assert pair["metrics"]["replica_keys_scanned"] == 1
        assert pair["servers"]["replica"]["endpoint"] == f"redis://auditor:***@127.0.0.1:{replica.port}"
        # redis-py also reads the credentials from the query: that URL was shown whole (summary, report, state)
        query_url = f"redis://127.0.0.1:{master.port}?username=auditor&password={secret}"
        pairs = [{"name": "ro", "kind": "redis", "master": query_url, "replica": "conn:ro_replica"}]
        inv = write_inventory(tmp_path / "inv-query.yaml", pairs)
        assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 0
        captured = capsys.readouterr()
        assert secret not in captured.out + captured.err
        for path in (tmp_path / "out").rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path
    finally:
        replica.stop()
        master.stop()


def _hot_writer(master: RedisServer, stop: threading.Event, pause_s: dict[bytes, float]) -> None:
    """Keeps writing: each key's field f gets a new value every pause_s[key] seconds."""
    c = master.client()
    n = 0
    due = dict.fromkeys(pause_s, 0.0)
    while not stop.is_set():
        now = time.monotonic()
        for key, pause in pause_s.items():
            if now >= due[key]:
                c.hset(key, b"f", n)
                due[key] = now + pause
        n += 1
        time.sleep(0.0002)


def test_keys_written_during_the_recheck_are_judged_not_dropped(fresh_pair, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A broken replica must not hide behind a key the master keeps writing: the recheck judges such keys
    against the replication stream (the old recheck dropped them as "in flight" and reported nothing)."""
    master, replica = fresh_pair
    c = master.client()
    c.mset({f"plain:{i}": i for i in range(500)})
    writes = {b"warm": 0.05, b"hot": 0.0, b"hot-healthy": 0.0, b"warm-healthy": 0.05}
    for key in writes:
        c.hset(key, b"f", b"0")
    wait_in_sync(master, replica)
    r = replica.client()
    r.config_set("replica-read-only", "no")
    for key in (b"warm", b"hot"):
        r.hset(key, b"planted", b"1")  # the replica now holds a field its master never wrote
    stop = threading.Event()
    writer = threading.Thread(target=_hot_writer, args=(master, stop, writes), daemon=True)
    writer.start()
    try:
        time.sleep(0.3)
        inv = write_inventory(
            tmp_path / "inv.yaml", [pair_entry("p", master, replica, gate={"max_in_flight": 0})], recheck_rounds=2
        )
        code = run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch)
    finally:
        stop.set()
        writer.join()
    root = latest_run(tmp_path / "out")
    got = {(f["category"], f["key"]) for f in findings(root)}
    assert got == {("value_mismatch", b"warm"), ("value_mismatch", b"hot")}
    assert code == 1
    m = summary(root)["pairs"][0]["metrics"]
    assert m["recheck_in_flight"] == 0 and m["recheck_confirmed_live"] == 2


def test_a_hot_key_whose_ttl_diverges_is_judged_by_its_ttl(fresh_pair, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The hot-key judge compared expiry as present or not: a replica holding another TTL than its
    master on a key the master keeps writing was judged in agreement, and the audit passed."""
    master, replica = fresh_pair
    c = master.client()
    c.mset({f"plain:{i}": i for i in range(200)})
    writes = {b"hot": 0.0, b"hot-healthy": 0.0}
    for key in writes:
        c.hset(key, b"f", b"0")
        c.expire(key, 3600)
    wait_in_sync(master, replica)
    r = replica.client()
    r.config_set("replica-read-only", "no")
    # 50 minutes sooner than its master's, to the ms: from the master's own expiry, not from a second
    # EXPIRE whose distance to the master's (a sync wait apart) grows with the machine's load
    r.pexpireat(b"hot", c.pexpiretime(b"hot") - 3_000_000)
    stop = threading.Event()
    writer = threading.Thread(target=_hot_writer, args=(master, stop, writes), daemon=True)
    writer.start()
    try:
        time.sleep(0.3)
        pair = pair_entry("p", master, replica, gate={"max_in_flight": 0})
        inv = write_inventory(tmp_path / "inv.yaml", [pair], recheck_rounds=2)
        code = run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch)
    finally:
        stop.set()
        writer.join()
    root = latest_run(tmp_path / "out")
    [f] = findings(root)
    assert (f["category"], f["key"]) == ("ttl_mismatch", b"hot")
    assert abs(json.loads(f["detail"])["ttl_delta_ms"] + 3_000_000) < 2000  # the replica's expiry is sooner
    m = summary(root)["pairs"][0]["metrics"]
    assert code == 1 and m["recheck_in_flight"] == 0 and m["recheck_confirmed_live"] == 1


def test_a_big_hot_key_is_never_read_whole(fresh_pair, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The hot-key judge reads a key whole in one pipeline (HGETALL, LRANGE 0 -1, ...), again and again for
    up to a second: on a key bigger than a page that blocked the server and held the value in memory."""
    import audit.sources.redis.recheck as recheck_module

    master, replica = fresh_pair
    c = master.client()
    for start in range(0, 20_000, 5000):
        c.hset("big", mapping={f"f{i}": i for i in range(start, start + 5000)})
    wait_in_sync(master, replica)
    r = replica.client()
    r.config_set("replica-read-only", "no")
    r.hset("big", "planted", "1")
    c.config_resetstat()
    real, written = recheck_module.read_keys, [0]

    def written_before_each_read(reader, keys, pacer=None):  # type: ignore[no-untyped-def]
        # the master writes the key before every recheck read, so each round's two master reads differ and
        # it is still moving after the rounds: a writer thread beside the audit, under load, sometimes
        # wrote nothing between them, and the key was confirmed divergent instead of reaching the judge
        written[0] += 1
        c.hset("big", "f", written[0])
        return real(reader, keys, pacer)

    monkeypatch.setattr(recheck_module, "read_keys", written_before_each_read)
    pair = pair_entry("p", master, replica, gate={"max_in_flight": 0})
    inv = write_inventory(tmp_path / "inv.yaml", [pair], recheck_rounds=2, big_key_elements=1000)
    code = run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch)
    stats = c.info("commandstats")
    assert "cmdstat_hgetall" not in stats, stats.get("cmdstat_hgetall")
    # left undecided (in flight, counted), which max_in_flight: 0 fails, as the README says
    s = summary(latest_run(tmp_path / "out"))["pairs"][0]
    assert code == 1 and s["metrics"]["recheck_in_flight"] == 1
    # said where a reader looks, not only in the metrics
    assert any(line.startswith("1 undecided after the recheck (in_flight: ") for line in s["compared"])
    report = (latest_run(tmp_path / "out") / "report.html").read_text()
    assert "undecided after the recheck" in report and "full coverage" not in report


def test_the_recheck_keeps_the_keys_per_second_cap(fresh_pair, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """max_keys_per_s is a hard cap per server: the recheck read every candidate (up to recheck_max_keys,
    twice a round on the master) at full speed, 20-50x the cap when a replica had lost many keys."""
    master, replica = fresh_pair
    master.client().eval(
        "redis.set_repl(redis.REPL_NONE); for i = 1, 1000 do redis.call('SET', 'lost:' .. i, i) end", 0
    )
    cap = 400
    inv = write_inventory(
        tmp_path / "inv.yaml", [pair_entry("p", master, replica)], recheck_rounds=1, max_keys_per_s=cap
    )
    out = str(tmp_path / "out")
    assert run_cli(["snapshot", "-i", str(inv), "-o", out], monkeypatch) == 0
    run_id = latest_run(tmp_path / "out").name
    assert run_cli(["diff", "-i", str(inv), "-o", out, "--run-id", run_id], monkeypatch) == 0
    c = master.client()
    c.config_resetstat()
    started = time.monotonic()
    assert run_cli(["recheck", "-i", str(inv), "-o", out, "--run-id", run_id], monkeypatch) == 0
    took = time.monotonic() - started
    reads = c.info("commandstats")["cmdstat_type"]["calls"]  # one TYPE per key read
    assert reads >= 2000 and reads / took <= cap * 1.2, (reads, took)
    assert summary_metrics_of(tmp_path, run_id)["recheck_divergent"] == 1000


def test_a_difference_the_recheck_cannot_read_is_not_converged(fresh_pair, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """An error reply at the recheck (here the replica's ACL narrowed between the stages: NOPERM; on a
    cluster MOVED or CLUSTERDOWN) made the key count as converged: the divergence vanished, and it passed."""
    master, replica = fresh_pair
    rights = ["on", ">pw", "+@read", "+info", "+client|list", "+select", "allkeys"]
    for s in (master, replica):
        s.client().execute_command("ACL", "SETUSER", "auditor", *rights)
    master.client().set("app:1", "x")
    master.client().eval("redis.set_repl(redis.REPL_NONE); return redis.call('SET', 'app:lost', '1')", 0)
    wait_in_sync(master, replica)
    urls = [f"redis://auditor:pw@127.0.0.1:{s.port}" for s in (master, replica)]
    pair = {"name": "p", "kind": "redis", "master": urls[0], "replica": urls[1]}
    inv = write_inventory(tmp_path / "inv.yaml", [pair], recheck_rounds=2)
    out = str(tmp_path / "out")
    assert run_cli(["snapshot", "-i", str(inv), "-o", out], monkeypatch) == 0
    run_id = latest_run(tmp_path / "out").name
    assert run_cli(["diff", "-i", str(inv), "-o", out, "--run-id", run_id], monkeypatch) == 0
    replica.client().execute_command("ACL", "SETUSER", "auditor", "resetkeys", "~other:*")
    for stage in ("recheck", "gate"):
        code = run_cli([stage, "-i", str(inv), "-o", out, "--run-id", run_id], monkeypatch)
    assert code == 1
    metrics = summary_metrics_of(tmp_path, run_id)
    assert metrics["recheck_unreadable"] == 1 and metrics["recheck_converged"] == 0


def summary_metrics_of(tmp_path: Path, run_id: str) -> dict[str, object]:
    state = json.loads((tmp_path / "out" / run_id / "work" / "p" / "state.json").read_text())
    metrics: dict[str, object] = state["metrics"]
    return metrics


def test_a_sync_replica_that_announced_its_port_is_diagnosed(redis_pair, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """What a real replica whose PSYNC failed does: REPLCONF listening-port, then plain SYNC, no acks."""
    import socket

    master, replica = redis_pair
    master.client(7).set("y", "1")
    wait_in_sync(master, replica)
    sock = socket.create_connection(("127.0.0.1", master.port))
    try:
        sock.sendall(b"*3\r\n$8\r\nREPLCONF\r\n$14\r\nlistening-port\r\n$4\r\n7777\r\n")
        assert sock.recv(64).startswith(b"+OK")
        sock.sendall(b"*1\r\n$4\r\nSYNC\r\n")
        code, root = _audit_db_beside_a_sync_client(master, replica, 7, tmp_path, monkeypatch, replconf_after=False)
    finally:
        sock.close()
    [f] = findings(root)
    assert (f["category"], f["diagnosis"]) == ("lag_metric_unreliable", "REDIS_SYNC_NO_ACK"), f["detail"]
    assert json.loads(f["detail"])["slave_port"] == 7777 and code == 0


def test_the_hot_key_judge_keeps_the_keys_per_second_cap(fresh_pair) -> None:  # type: ignore[no-untyped-def]
    """The judge reads a still-moving key again and again until the replica's offset brackets it: without
    a pacer it read as fast as the servers answered (hundreds of reads a second), past max_keys_per_s."""
    from audit.pacing import Pacer, PaceSettings
    from audit.sources.redis.client import connect
    from audit.sources.redis.hotkeys import judge
    from audit.sources.redis.resp import RespPipe

    master, replica = fresh_pair
    master.client().hset("hot", "f", 1)
    wait_in_sync(master, replica)
    replica.client().replicaof("no", "one")  # no replica offset: the judge never decides, it reads till its time is up
    pipes = [RespPipe(connect(s.url, role=side)) for s, side in ((master, "master"), (replica, "replica"))]
    try:
        reads = []
        for paced in ((None, None), tuple(Pacer(PaceSettings(max_keys_per_s=20)) for _ in range(2))):
            master.client().config_resetstat()
            assert judge(pipes[0], pipes[1], 0, b"hot", "hash", 1.0, paced, tolerance_ms=2000) is None  # type: ignore[arg-type]
            reads.append(int(master.client().info("commandstats")["cmdstat_pttl"]["calls"]))
    finally:
        for p in pipes:
            p.close()
    unpaced, capped = reads
    assert unpaced > 100 and capped <= 25, reads
