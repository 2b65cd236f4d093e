"""Start real private MariaDB servers on loopback: one server, or a master and a GTID replica.

Each server lives in its own directory (datadir, socket, binlogs, error log), listens on 127.0.0.1
only, and has two accounts with the server's generated password: `root` (unix socket only) and
`audit` (any host, all privileges), so tests use real password authentication. Account set-up is
never written to the binlog, so a replica only replays the data the test writes.

Works as root (mariadbd then needs `--user=root`) and as an ordinary user.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql

SERVER_BINARIES = ("mariadbd", "mysqld")
INSTALL_BINARIES = ("mariadb-install-db", "mysql_install_db")
_SBIN = ("/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin")

SMALL_FOOTPRINT = (
    "--innodb-buffer-pool-size=32M",
    "--innodb-log-file-size=8M",
    "--innodb-data-file-path=ibdata1:10M:autoextend",
)
"""A test server needs ~25 MB on disk instead of ~115 MB, and starts faster."""

AUDITOR_GRANTS = ("SELECT", "SLAVE MONITOR")
"""What replica-audit needs on MariaDB 10.5.9+: SELECT, and SLAVE MONITOR for SHOW ALL SLAVES STATUS
(MySQL: SELECT and REPLICATION CLIENT)."""

START_TIMEOUT_S = 30.0
_SOCKET_PATH_MAX = 100  # AF_UNIX paths are limited to 108 bytes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def find_binary(names: tuple[str, ...]) -> str | None:
    """PATH first, then the sbin directories a non-root PATH usually lacks."""
    for name in names:
        found = shutil.which(name) or shutil.which(name, path=os.pathsep.join(_SBIN))
        if found:
            return found
    return None


def mariadb_available() -> bool:
    return find_binary(SERVER_BINARIES) is not None and find_binary(INSTALL_BINARIES) is not None


def _user_args() -> list[str]:
    # mariadbd refuses to run as root unless told so; as anyone else --user only earns a warning
    return ["--user=root"] if os.geteuid() == 0 else []


@dataclass
class MariaDBServer:
    port: int
    workdir: Path
    server_id: int = 1
    password: str = field(default_factory=lambda: secrets.token_hex(12))
    extra: list[str] = field(default_factory=list)
    user: str = "audit"
    proc: subprocess.Popen[bytes] | None = None
    _socket_dir: Path | None = None
    _accounts_ready: bool = False

    @property
    def datadir(self) -> Path:
        return self.workdir / "data"

    @property
    def error_log(self) -> Path:
        return self.workdir / "error.log"

    @property
    def socket_path(self) -> Path:
        if self._socket_dir is None:
            short = self.workdir / "mysqld.sock"
            if len(str(short.resolve())) <= _SOCKET_PATH_MAX:
                self._socket_dir = self.workdir
            else:
                self._socket_dir = Path(tempfile.mkdtemp(prefix="ra-mdb-"))
        return self._socket_dir / "mysqld.sock"

    @property
    def _accounts_marker(self) -> Path:
        return self.workdir / "accounts.created"

    def url(self, database: str = "") -> str:
        """`mysql://audit:<password>@127.0.0.1:<port>/<database>`: secret, show it through redact_url."""
        return f"mysql://{self.user}:{self.password}@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str | None = None, *, admin: bool = False, **kwargs: Any) -> pymysql.Connection[Any]:
        """A connection as `audit` over TCP, or as root over the unix socket (`admin=True`)."""
        if admin:
            return pymysql.connect(
                unix_socket=str(self.socket_path),
                user="root",
                password=self.password,
                database=database,
                autocommit=True,
                **kwargs,
            )
        return pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user=self.user,
            password=self.password,
            database=database,
            autocommit=True,
            **kwargs,
        )

    def execute(self, *statements: str, database: str | None = None) -> list[tuple[Any, ...]]:
        """Run statements as root; returns the rows of the last one."""
        with self.connect(database, admin=True) as conn, conn.cursor() as cur:
            rows: list[tuple[Any, ...]] = []
            for statement in statements:
                cur.execute(statement)
                rows = list(cur.fetchall())
            return rows

    # --- lifecycle ----------------------------------------------------------------------------------
    def _install(self) -> None:
        installer = find_binary(INSTALL_BINARIES)
        if installer is None:
            raise RuntimeError("mariadb-install-db not found: apt-get install mariadb-server")
        log = self.workdir / "install.log"
        with log.open("wb") as out:
            rc = subprocess.run(
                [
                    installer,
                    "--no-defaults",
                    f"--datadir={self.datadir}",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                    "--skip-name-resolve",
                    # its own temp dir: installs running at once (parallel tests) collided on /tmp's
                    # "#sql-temptable-*" files and aborted with "Unknown table mysql.tmp_proxies_priv"
                    f"--tmpdir={self.workdir}",
                    *_user_args(),
                    *SMALL_FOOTPRINT,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            ).returncode
        if rc != 0:
            raise RuntimeError(f"mariadb-install-db failed ({rc}); see {log}")

    def start(self) -> MariaDBServer:
        exe = find_binary(SERVER_BINARIES)
        if exe is None:
            raise RuntimeError("mariadbd not found: apt-get install mariadb-server")
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not (self.datadir / "mysql").is_dir():
            self._install()
        self._accounts_ready = self._accounts_marker.exists()
        args = [
            exe,
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--socket={self.socket_path}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--pid-file={self.workdir / 'mysqld.pid'}",
            f"--log-error={self.error_log}",
            f"--tmpdir={self.workdir}",
            f"--server-id={self.server_id}",
            "--log-bin=mariadb-bin",
            "--relay-log=relay-bin",
            "--binlog-format=ROW",
            "--gtid-strict-mode=ON",
            "--skip-name-resolve",
            "--performance-schema=OFF",
            "--character-set-server=utf8mb4",
            "--innodb-flush-log-at-trx-commit=2",
            "--sync-binlog=0",
            *SMALL_FOOTPRINT,
            *_user_args(),
            *self.extra,
        ]
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
        )
        self._wait_ready()
        if not self._accounts_ready:
            self._create_accounts()
        return self

    def _wait_ready(self) -> None:
        deadline = time.time() + START_TIMEOUT_S
        while time.time() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"mariadbd on {self.port} exited ({self.proc.returncode}):\n{self._log_tail()}")
            try:
                password = self.password if self._accounts_ready else ""
                pymysql.connect(
                    unix_socket=str(self.socket_path), user="root", password=password, connect_timeout=2
                ).close()
                return
            except pymysql.err.OperationalError as e:
                if e.args and e.args[0] == 1045:
                    self.stop()
                    raise RuntimeError(
                        f"{self.datadir} was set up with another root password than this "
                        "server's; pass the original `password` or use a new workdir"
                    ) from None
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"mariadbd on {self.port} not ready after {START_TIMEOUT_S:.0f}s:\n{self._log_tail()}")

    def _log_tail(self, lines: int = 15) -> str:
        if not self.error_log.exists():
            return "(no error log)"
        return "\n".join(self.error_log.read_text(errors="replace").splitlines()[-lines:])

    def _create_accounts(self) -> None:
        with pymysql.connect(unix_socket=str(self.socket_path), user="root", password="", autocommit=True) as conn:
            with conn.cursor() as cur:
                cur.execute("SET sql_log_bin = 0")
                cur.execute("SELECT host FROM mysql.user WHERE user = 'root' AND host <> 'localhost'")
                for (host,) in cur.fetchall():
                    cur.execute("DROP USER 'root'@%s", (host,))
                cur.execute("ALTER USER 'root'@'localhost' IDENTIFIED BY %s", (self.password,))
                cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (self.user, self.password))
                cur.execute("GRANT ALL PRIVILEGES ON *.* TO %s@'%%' WITH GRANT OPTION", (self.user,))
        self._accounts_marker.write_text("root and audit created; password kept by the caller\n")
        self._accounts_ready = True

    def create_auditor(
        self, user: str = "auditor", password: str | None = None, grants: tuple[str, ...] = AUDITOR_GRANTS
    ) -> str:
        """A least-privilege account (SELECT + replication monitoring), outside the binlog; its URL.

        The URL holds the password: show it through redact_url.
        """
        password = password or secrets.token_hex(12)
        with self.connect(admin=True) as conn, conn.cursor() as cur:
            cur.execute("SET sql_log_bin = 0")
            cur.execute("CREATE USER IF NOT EXISTS %s@'%%' IDENTIFIED BY %s", (user, password))
            cur.execute("ALTER USER %s@'%%' IDENTIFIED BY %s", (user, password))
            for grant in grants:
                cur.execute(f"GRANT {grant} ON *.* TO %s@'%%'", (user,))
        return f"mysql://{user}:{password}@127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: a clean shutdown that flushes InnoDB
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._socket_dir is not None and self._socket_dir != self.workdir:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None


# --- replication ------------------------------------------------------------------------------------
REPL_USER = "repl"


def start_pair(
    workdir: Path,
    master_port: int | None = None,
    replica_port: int | None = None,
    *,
    replica_options: Sequence[str] = (),
) -> tuple[MariaDBServer, MariaDBServer]:
    """A master and a replica following it by GTID (`MASTER_USE_GTID=slave_pos`), both with binlogs.

    Both servers share one password (for `root`, `audit` and the replication account), so one URL
    template serves both sides. `replica_options` are added to the replica's command line (such as
    `--slave-parallel-threads=4`). Returned once the replica's IO and SQL threads are running.
    """
    password = secrets.token_hex(12)
    master = MariaDBServer(master_port or free_port(), workdir / "master", server_id=1, password=password).start()
    try:
        replica = MariaDBServer(
            replica_port or free_port(), workdir / "replica", server_id=2, password=password, extra=[*replica_options]
        ).start()
    except BaseException:
        master.stop()
        raise
    try:
        follow(replica, master)
    except BaseException:
        replica.stop()
        master.stop()
        raise
    return master, replica


def follow(replica: MariaDBServer, master: MariaDBServer, timeout_s: float = 20) -> None:
    """Make `replica` replicate `master` from the start of its binlog, by GTID."""
    with master.connect(admin=True) as conn, conn.cursor() as cur:
        cur.execute("SET sql_log_bin = 0")
        cur.execute("CREATE USER IF NOT EXISTS %s@'%%' IDENTIFIED BY %s", (REPL_USER, master.password))
        cur.execute("GRANT REPLICATION SLAVE ON *.* TO %s@'%%'", (REPL_USER,))
    with replica.connect(admin=True) as conn, conn.cursor() as cur:
        cur.execute("STOP SLAVE")
        cur.execute(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = %s, MASTER_USER = %s, "
            "MASTER_PASSWORD = %s, MASTER_CONNECT_RETRY = 1, MASTER_USE_GTID = slave_pos",
            (master.port, REPL_USER, master.password),
        )
        cur.execute("START SLAVE")
    wait_link_up(replica, timeout_s)


def replica_status(replica: MariaDBServer) -> dict[str, Any]:
    with replica.connect(admin=True, cursorclass=pymysql.cursors.DictCursor) as conn, conn.cursor() as cur:
        cur.execute("SHOW SLAVE STATUS")
        row: dict[str, Any] | None = cur.fetchone()  # type: ignore[assignment]
    return row or {}


def wait_link_up(replica: MariaDBServer, timeout_s: float = 20) -> None:
    deadline = time.time() + timeout_s
    status: dict[str, Any] = {}
    while time.time() < deadline:
        status = replica_status(replica)
        if status.get("Slave_IO_Running") == "Yes" and status.get("Slave_SQL_Running") == "Yes":
            return
        time.sleep(0.1)
    raise RuntimeError(
        f"replica on {replica.port} did not start replicating: "
        f"IO={status.get('Slave_IO_Running')} SQL={status.get('Slave_SQL_Running')} "
        f"{status.get('Last_IO_Error') or status.get('Last_SQL_Error') or ''}"
    )


def wait_in_sync(master: MariaDBServer, replica: MariaDBServer, timeout_s: float = 30) -> None:
    """Until the replica has applied every transaction the master has binlogged so far."""
    (position,) = master.execute("SELECT @@gtid_binlog_pos")[0]
    if not position:
        return
    with replica.connect(admin=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (position, timeout_s))
        (result,) = cur.fetchone()  # type: ignore[misc]
    if result != 0:
        raise RuntimeError(f"replica on {replica.port} did not reach the master's GTID position {position}")
