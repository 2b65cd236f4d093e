"""Kind mysql on replication set-ups beyond one master and one GTID replica, on real MariaDB servers:
a replica fed by two masters (multi-source, named connections), one of its connections delayed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.local.mariadb_server import (
    REPL_USER,
    MariaDBServer,
    follow,
    free_port,
    mariadb_available,
    wait_in_sync,
    wait_link_up,
)
from audit.sources.mysql.endpoint import MySQLSettings
from audit.sources.mysql.engine import audit_tables
from audit.sources.mysql.replication import replication_findings
from tests.integration.helpers import findings, latest_run, run_cli, write_inventory

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not mariadb_available(), reason="mariadbd not installed (apt-get install mariadb-server)"),
]

SETTINGS = MySQLSettings(gtid_wait_s=3, recheck_interval_s=0.05)


def _follow_named(replica: MariaDBServer, master: MariaDBServer, name: str) -> None:
    with master.connect(admin=True) as conn, conn.cursor() as cur:
        cur.execute("SET sql_log_bin = 0")
        cur.execute("CREATE USER IF NOT EXISTS %s@'%%' IDENTIFIED BY %s", (REPL_USER, master.password))
        cur.execute("GRANT REPLICATION SLAVE ON *.* TO %s@'%%'", (REPL_USER,))
    replica.execute(
        f"CHANGE MASTER '{name}' TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {master.port}, "
        f"MASTER_USER = '{REPL_USER}', MASTER_PASSWORD = '{master.password}', MASTER_CONNECT_RETRY = 1, "
        "MASTER_USE_GTID = slave_pos",
        f"START SLAVE '{name}'",
    )


@pytest.fixture(scope="module")
def multi_source(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[MariaDBServer, MariaDBServer, MariaDBServer]]:
    """Master A (domain 0) on the default connection and master B (domain 1) on connection 'b' of one
    replica that binlogs what it applies (log_slave_updates, as a multi-source hub usually does)."""
    work: Path = tmp_path_factory.mktemp("mysql-multi-source")
    a = MariaDBServer(free_port(), work / "a", server_id=1, password="pw-multi-source").start()
    servers = [a]
    try:
        b = MariaDBServer(free_port(), work / "b", server_id=3, password=a.password, extra=["--gtid-domain-id=1"])
        servers.append(b.start())
        r = MariaDBServer(free_port(), work / "r", server_id=2, password=a.password, extra=["--log-slave-updates=ON"])
        servers.append(r.start())
        follow(r, a)
        _follow_named(r, b, "b")
        a.execute("CREATE DATABASE sa", "CREATE TABLE sa.t (id INT PRIMARY KEY, v INT)")
        a.execute("INSERT INTO sa.t SELECT seq, seq FROM sa.seq_1_to_1000")
        b.execute("CREATE DATABASE sb", "CREATE TABLE sb.t (id INT PRIMARY KEY, v INT)")
        b.execute("INSERT INTO sb.t SELECT seq, seq FROM sb.seq_1_to_1000")
        wait_in_sync(a, r)
        wait_in_sync(b, r)
        yield a, b, r
    finally:
        for server in reversed(servers):
            server.stop()


def test_a_second_masters_transactions_are_not_errant_for_the_first(multi_source) -> None:  # type: ignore[no-untyped-def]
    a, b, r = multi_source
    b.execute(*(f"UPDATE sb.t SET v = v + 1 WHERE id = {i}" for i in range(1, 30)))  # B writes on during the audit
    result = replication_findings(a.create_auditor(), r.create_auditor(), SETTINGS)
    assert result.findings == [] and result.follows_master and result.metrics["errant_gtids"] == 0
    rows = audit_tables(None, a.create_auditor(), r.create_auditor(), ["sa.*"], SETTINGS)
    assert rows.findings == [] and rows.uncovered == []
    wait_in_sync(b, r)
    assert replication_findings(b.create_auditor(), r.create_auditor(), SETTINGS).findings == []


def test_a_write_on_the_multi_source_replica_is_still_errant(multi_source) -> None:  # type: ignore[no-untyped-def]
    a, _b, r = multi_source
    r.execute("INSERT INTO sa.t VALUES (5000, 1)", "INSERT INTO sa.t VALUES (5001, 1)")  # binlogged: errant
    try:
        result = replication_findings(a.create_auditor(), r.create_auditor(), SETTINGS)
        errant = [f for f in result.findings if f.category == "errant_gtid"]
        assert len(errant) == 1 and errant[0].count == 2 and errant[0].start.startswith("0-2-")
    finally:
        r.execute("SET SESSION sql_log_bin = 0", "DELETE FROM sa.t WHERE id IN (5000, 5001)", "RESET MASTER")


def test_a_delayed_replica_leaves_written_chunks_uncovered_saying_it_is_delayed(multi_source) -> None:  # type: ignore[no-untyped-def]
    a, _b, r = multi_source
    wait_in_sync(a, r)
    r.execute("STOP SLAVE ''", "CHANGE MASTER '' TO MASTER_DELAY = 60", "START SLAVE ''")
    try:
        wait_link_up(r)
        a.execute("UPDATE sa.t SET v = v + 1 WHERE id <= 5", "DELETE FROM sa.t WHERE id = 900")
        rows = audit_tables(None, a.create_auditor(), r.create_auditor(), ["sa.*"], SETTINGS)
        assert rows.findings == [] and rows.uncovered, "a delayed replica is no proof of a divergence"
        assert all("MASTER_DELAY = 60 s" in u["reason"] for u in rows.uncovered), rows.uncovered
        lagging = replication_findings(a.create_auditor(), r.create_auditor(), SETTINGS).findings
        assert [f.category for f in lagging] == ["lagging"] and lagging[0].evidence["sql_delay"] == 60
    finally:
        r.execute("STOP SLAVE ''", "CHANGE MASTER '' TO MASTER_DELAY = 0", "START SLAVE ''")
        wait_link_up(r)
        wait_in_sync(a, r)


def test_the_cli_passes_a_healthy_multi_source_hub_for_each_master(multi_source, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    a, b, r = multi_source
    wait_in_sync(a, r)
    wait_in_sync(b, r)
    settings = {"recheck_interval_s": 0.05, "gtid_wait_s": 3}
    hub = r.create_auditor()  # one password: each call sets a new one
    entries = [
        {
            "name": f"hub-{n}",
            "kind": "mysql",
            "master": m.create_auditor(),
            "replica": hub,
            "tables": [f"{s}.*"],
            "settings": settings,
        }
        for n, m, s in (("a", a, "sa"), ("b", b, "sb"))
    ]
    inv = write_inventory(tmp_path / "inv.yaml", entries)
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 0
    assert findings(latest_run(tmp_path / "out")) == []


def test_a_stopped_sql_thread_leaves_written_chunks_uncovered_saying_it_is_stopped(multi_source) -> None:  # type: ignore[no-untyped-def]
    a, _b, r = multi_source
    wait_in_sync(a, r)
    r.execute("STOP SLAVE '' SQL_THREAD")
    try:
        a.execute("UPDATE sa.t SET v = v + 1 WHERE id <= 5")
        rows = audit_tables(None, a.create_auditor(), r.create_auditor(), ["sa.*"], SETTINGS)
    finally:
        r.execute("START SLAVE '' SQL_THREAD")
        wait_link_up(r)
        wait_in_sync(a, r)
    assert rows.findings == [] and rows.uncovered
    assert all("the replica's SQL thread is not running" in u["reason"] for u in rows.uncovered), rows.uncovered
