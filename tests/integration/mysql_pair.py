"""A real MariaDB master and GTID replica for the mysql row tests: plant differences, audit as a
least-privilege account (SELECT + SLAVE MONITOR)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from audit.local.mariadb_server import MariaDBServer, start_pair, wait_in_sync, wait_link_up
from audit.sources.mysql.endpoint import MySQLSettings
from audit.sources.mysql.engine import RowsAudit, audit_tables

FAST = MySQLSettings(recheck_interval_s=0.05, gtid_wait_s=5, min_chunk_rows=50, max_chunk_rows=400, fetch_rows=40)


class Pair:
    def __init__(self, master: MariaDBServer, replica: MariaDBServer) -> None:
        self.master, self.replica = master, replica
        self.master_url = master.create_auditor()
        self.replica_url = replica.create_auditor()

    def on_master(self, *statements: str) -> None:
        self.master.execute(*statements)
        wait_in_sync(self.master, self.replica)

    def on_replica_only(self, *statements: str) -> None:
        """Differences planted with sql_log_bin = 0, so replication stays healthy."""
        self.replica.execute("SET SESSION sql_log_bin = 0", *statements)

    @contextmanager
    def sql_thread_stopped(self) -> Iterator[None]:
        """The replica's SQL thread stopped for the block (writes on the master are not applied), started
        again after it, however it ends, and replicating before the next test."""
        self.replica.execute("STOP SLAVE SQL_THREAD")
        try:
            yield
        finally:
            self.replica.execute("START SLAVE SQL_THREAD")
            wait_link_up(self.replica)

    def audit(self, tables: list[str], settings: MySQLSettings = FAST, **kw: Any) -> RowsAudit:
        return audit_tables(kw.pop("spark", None), self.master_url, self.replica_url, tables, settings, **kw)

    def new_schema(self) -> str:
        name = "t_" + secrets.token_hex(3)
        self.on_master(f"CREATE DATABASE {name}")
        return name


def start_module_pair(workdir: Path, replica_options: Sequence[str] = ()) -> Iterator[Pair]:
    master, replica = start_pair(workdir, replica_options=replica_options)
    try:
        yield Pair(master, replica)
    finally:
        replica.stop()
        master.stop()


def statements(path: Path) -> list[str]:
    """A repair plan's statements (its comment lines left out)."""
    return [line for line in path.read_text().splitlines() if line and not line.startswith("--")]
