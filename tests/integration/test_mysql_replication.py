"""Kind mysql, replication state, on a real MariaDB master and GTID replica: link, lag, GTID sets.

The tests run in order on one pair: healthy, then a stopped IO thread with the master writing on
(link_down + missing_gtid, then it catches up), then an errant transaction written on the replica.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from audit.errors import SourceError
from audit.local.mariadb_server import MariaDBServer, mariadb_available, start_pair, wait_in_sync, wait_link_up
from audit.sources.mysql.endpoint import MySQLSettings
from audit.sources.mysql.replication import replication_findings

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not mariadb_available(), reason="mariadbd not installed (apt-get install mariadb-server)"),
]

SETTINGS = MySQLSettings(gtid_wait_s=2)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MariaDBServer, MariaDBServer, str, str]]:
    master, replica = start_pair(tmp_path_factory.mktemp("mysql-repl"))
    try:
        master.execute(
            "CREATE DATABASE shop", "CREATE TABLE shop.t (id INT PRIMARY KEY)", "INSERT INTO shop.t VALUES (1)"
        )
        wait_in_sync(master, replica)
        yield master, replica, master.create_auditor(), replica.create_auditor()
    finally:
        replica.stop()
        master.stop()


def test_healthy_pair_under_writes(servers: tuple[MariaDBServer, MariaDBServer, str, str]) -> None:
    master, _replica, m_url, r_url = servers
    master.execute(*(f"INSERT INTO shop.t VALUES ({i})" for i in range(2, 200)))  # the replica may be behind
    result = replication_findings(m_url, r_url, SETTINGS)
    assert result.findings == [] and result.follows_master
    assert result.metrics["link_up"] == 1 and result.metrics["errant_gtids"] == 0
    assert result.state["master_gtid_end"].startswith("0-1-")


def test_stopped_io_thread_is_link_down_and_missing_gtids(
    servers: tuple[MariaDBServer, MariaDBServer, str, str],
) -> None:
    master, replica, m_url, r_url = servers
    wait_in_sync(master, replica)
    (before,) = master.execute("SELECT @@gtid_binlog_pos")[0]
    replica.execute("STOP SLAVE IO_THREAD")
    try:
        master.execute("INSERT INTO shop.t VALUES (1000)", "INSERT INTO shop.t VALUES (1001)")
        result = replication_findings(m_url, r_url, SETTINGS)
    finally:
        replica.execute("START SLAVE IO_THREAD")
        wait_link_up(replica)
    cats = [f.category for f in result.findings]
    assert cats == ["link_down", "missing_gtid"]
    down, missing = result.findings
    assert down.evidence["Slave_IO_Running"] == "No" and down.evidence["Slave_SQL_Running"] == "Yes"
    seq = int(before.rsplit("-", 1)[1])
    assert (missing.start, missing.end, missing.count) == (f"0-1-{seq + 1}", f"0-1-{seq + 2}", 2)
    assert (missing.start_num, missing.end_num) == (seq + 1, seq + 2)
    wait_in_sync(master, replica)
    assert replication_findings(m_url, r_url, SETTINGS).findings == []


def test_sql_thread_error_is_link_down_with_its_last_error(
    servers: tuple[MariaDBServer, MariaDBServer, str, str],
) -> None:
    master, replica, m_url, r_url = servers
    replica.execute("SET SESSION sql_log_bin = 0", "INSERT INTO shop.t VALUES (5000)")
    master.execute("INSERT INTO shop.t VALUES (5000)")  # duplicate key on the replica: the SQL thread stops
    try:
        for _ in range(50):
            result = replication_findings(m_url, r_url, SETTINGS)
            if result.findings and result.findings[0].category == "link_down":
                break
        down = result.findings[0]
        assert down.category == "link_down" and down.evidence["Slave_SQL_Running"] == "No"
        assert "Duplicate entry '5000'" in down.evidence["last_error"]
        assert [f.category for f in result.findings] == ["link_down", "missing_gtid"]
    finally:
        replica.execute("SET SESSION sql_log_bin = 0", "DELETE FROM shop.t WHERE id = 5000", "START SLAVE")
        wait_link_up(replica)
        wait_in_sync(master, replica)


def test_wrong_master_and_not_a_replica(servers: tuple[MariaDBServer, MariaDBServer, str, str]) -> None:
    master, _replica, m_url, r_url = servers
    not_a_replica = replication_findings(r_url, m_url, SETTINGS)
    assert [f.category for f in not_a_replica.findings] == ["wrong_master"]
    assert not_a_replica.findings[0].evidence["reason"] == "not a replica" and not not_a_replica.follows_master
    other = replication_findings(r_url, r_url, SETTINGS)  # the replica follows the master, not itself
    assert other.findings[0].evidence["reason"] == "replicates from another master"
    assert other.findings[0].evidence["follows"][0]["master"] == f"127.0.0.1:{master.port}"


def test_missing_privilege_is_named(servers: tuple[MariaDBServer, MariaDBServer, str, str]) -> None:
    _master, replica, m_url, _ = servers
    select_only = replica.create_auditor("reader", grants=("SELECT",))
    with pytest.raises(SourceError, match=f"replica 127.0.0.1:{replica.port}: the auditor lacks .*SLAVE MONITOR"):
        replication_findings(m_url, select_only, SETTINGS)


def test_errant_transaction_on_the_replica(servers: tuple[MariaDBServer, MariaDBServer, str, str]) -> None:
    master, replica, m_url, r_url = servers
    wait_in_sync(master, replica)
    replica.execute("INSERT INTO shop.t VALUES (9000)", "INSERT INTO shop.t VALUES (9001)")  # binlogged: errant
    result = replication_findings(m_url, r_url, SETTINGS)
    errant = [f for f in result.findings if f.category == "errant_gtid"]
    assert len(errant) == 1 and errant[0].count == 2
    assert errant[0].start.startswith("0-2-") and errant[0].end.startswith("0-2-")  # server 2: the replica
    assert errant[0].end_num - errant[0].start_num == 1 and result.metrics["errant_gtids"] == 2


def test_a_domain_the_replica_ignores_is_missing_gtids_though_its_position_counts_them(
    servers: tuple[MariaDBServer, MariaDBServer, str, str],
) -> None:
    """IGNORE_DOMAIN_IDS: the replica never applies the domain's transactions, yet its gtid_slave_pos
    records them as reached: the check said nothing (the doc's 'filtered domain' missing_gtid), while
    the rows they wrote differ on the replica."""
    master, replica, m_url, r_url = servers
    wait_in_sync(master, replica)
    replica.execute("STOP SLAVE", "CHANGE MASTER TO IGNORE_DOMAIN_IDS = (7)", "START SLAVE")
    try:
        wait_link_up(replica)
        master.execute(
            "SET SESSION gtid_domain_id = 7", "INSERT INTO shop.t VALUES (7000)", "INSERT INTO shop.t VALUES (7001)"
        )
        wait_in_sync(master, replica)  # the replica's position reaches 7-1-2: it skipped them
        result = replication_findings(m_url, r_url, SETTINGS)
        assert replica.execute("SELECT COUNT(*) FROM shop.t WHERE id IN (7000, 7001)") == [(0,)]
    finally:
        replica.execute("STOP SLAVE", "CHANGE MASTER TO IGNORE_DOMAIN_IDS = ()", "START SLAVE")
        wait_link_up(replica)
        master.execute("SET SESSION sql_log_bin = 0", "DELETE FROM shop.t WHERE id IN (7000, 7001)")
    missing = [f for f in result.findings if f.category == "missing_gtid"]
    assert [(f.start, f.end, f.count) for f in missing] == [("7-1-1", "7-1-2", 2)]
    assert result.metrics["missing_gtids"] == 2
