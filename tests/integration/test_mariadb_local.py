"""The private MariaDB servers of audit.local: real password auth, restart, and a GTID replica that follows."""

from __future__ import annotations

from pathlib import Path

import pymysql
import pytest

from audit.local.mariadb_server import (
    MariaDBServer,
    free_port,
    mariadb_available,
    replica_status,
    start_pair,
    wait_in_sync,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not mariadb_available(), reason="mariadbd / mariadb-install-db not installed (apt-get install mariadb-server)"
    ),
]


def test_server_uses_real_passwords_and_survives_a_restart(tmp_path: Path) -> None:
    server = MariaDBServer(free_port(), tmp_path / "db").start()
    try:
        server.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY)", "INSERT INTO d.t VALUES (7)")
        with pytest.raises(pymysql.err.OperationalError) as e:
            pymysql.connect(host="127.0.0.1", port=server.port, user="audit", password="wrong")
        assert e.value.args[0] == 1045  # access denied
        with pytest.raises(pymysql.err.OperationalError):  # root: socket only
            pymysql.connect(host="127.0.0.1", port=server.port, user="root", password=server.password)
        server.stop()
        server = MariaDBServer(server.port, server.workdir, password=server.password).start()  # same datadir
        with server.connect("d") as conn, conn.cursor() as cur:
            cur.execute("SELECT id, CURRENT_USER() FROM t")
            assert cur.fetchall() == ((7, "audit@%"),)
        server.stop()
        with pytest.raises(RuntimeError, match="another root password"):
            MariaDBServer(server.port, server.workdir, password="other").start()
    finally:
        server.stop()


def test_pair_replicates_by_gtid(tmp_path: Path) -> None:
    master, replica = start_pair(tmp_path / "pair")
    try:
        master.execute(
            "CREATE DATABASE shop",
            "CREATE TABLE shop.orders (id INT PRIMARY KEY, total DECIMAL(9,2))",
            "INSERT INTO shop.orders VALUES (1, 9.50), (2, 12.00)",
            "UPDATE shop.orders SET total = 10 WHERE id = 1",
        )
        wait_in_sync(master, replica)
        assert replica.execute("SELECT id, total FROM shop.orders ORDER BY id") == [(1, 10), (2, 12)]
        status = replica_status(replica)
        assert (status["Using_Gtid"], status["Master_Port"]) == ("Slave_Pos", master.port)
        (master_pos,) = master.execute("SELECT @@gtid_binlog_pos")[0]
        (replica_pos,) = replica.execute("SELECT @@gtid_slave_pos")[0]
        assert master_pos == replica_pos and master_pos.startswith("0-1-")
        # account set-up stays out of the binlog: the replica only replays the test's data
        assert replica.execute("SELECT COUNT(*) FROM mysql.user WHERE user = 'repl'") == [(0,)]
    finally:
        replica.stop()
        master.stop()
