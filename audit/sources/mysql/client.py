"""Read-only sessions on one server, and pymysql's errors turned into the auditor's.

Every session reads in REPEATABLE READ, READ ONLY, with a fixed time zone (TIMESTAMP text must not
depend on a server's setting) and a fixed sql_mode (PAD_CHAR_TO_FULL_LENGTH or ANSI_QUOTES on one
side only would change what is read). Values come back as the server's text-protocol bytes,
unconverted: equal bytes are what the row hashes compare.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pymysql

from audit.errors import AuditError, ConfigError, SourceConnectError, SourceError
from audit.sources.mysql.endpoint import MySQLEndpoint
from audit.sources.mysql.gtid import Flavor

Row = tuple[bytes | None, ...]

SESSION_SETUP = (
    "SET SESSION time_zone = '+00:00', sql_mode = 'NO_ENGINE_SUBSTITUTION'",
    "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY",
)
START_SNAPSHOT = "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"

CONNECT_ERRORS = frozenset({2002, 2003, 2005, 2006, 2013})
"""Cannot connect, unknown host, server gone, connection lost."""
HANDSHAKE_MIN_S = 10.0
"""The shortest wait for a server's handshake: a loaded server may take seconds to authenticate."""
TABLE_GONE_ERRORS = frozenset({1054, 1146, 1176, 1412})
"""Unknown column, no such table, key gone, table definition changed: the table was altered under us."""
_PRIVILEGE = re.compile(r"you need \(at least one of\) the (.+?) privilege", re.IGNORECASE)
_COMMAND_DENIED = re.compile(r"^(\w+) command denied to user .+? for table (.+)$", re.IGNORECASE)


class TableGone(AuditError):
    """A table disappeared or changed definition while it was read (reported as uncovered)."""


def audit_error(e: pymysql.MySQLError, endpoint: MySQLEndpoint, side: str, doing: str) -> AuditError:
    """The auditor's exception for a driver error: host named, missing privilege named, no password."""
    code = e.args[0] if e.args and isinstance(e.args[0], int) else 0
    message = str(e.args[1]) if len(e.args) > 1 else str(e)
    where = endpoint.where
    if code in CONNECT_ERRORS or isinstance(e, pymysql.err.InterfaceError):
        return SourceConnectError(f"{side} {where}: cannot reach the server ({message})", where=where)
    if code == 1045:
        return SourceConnectError(
            f"{side} {where}: access denied for user {endpoint.user!r} (wrong password, or the account does "
            f"not exist for this host)",
            where=where,
        )
    if code == 1227:
        m = _PRIVILEGE.search(message)
        needed = f"(one of) the {m.group(1)} privilege" if m else "a replication-monitoring privilege"
        return SourceError(f"{side} {where}: the auditor lacks {needed}, needed for {doing}", where=where)
    if code in (1142, 1143, 1044):
        m = _COMMAND_DENIED.search(message)
        needed = f"the {m.group(1).upper()} privilege on {m.group(2)}" if m else "a privilege"
        return SourceError(f"{side} {where}: the auditor lacks {needed}, needed for {doing} ({message})", where=where)
    if code in TABLE_GONE_ERRORS:
        return TableGone(f"{side} {where}: {message}")
    return SourceError(f"{side} {where}: {doing} failed: ({code}) {message}", where=where)


def _timed_out(e: pymysql.MySQLError) -> bool:
    """A connection lost to a socket timeout (pymysql's 2013 "... (timed out)")."""
    return bool(e.args) and e.args[0] == 2013 and "timed out" in str(e.args[-1])


@dataclass
class Server:
    """One read-only session. `flavor` is mariadb or mysql, from VERSION()."""

    endpoint: MySQLEndpoint
    side: str
    conn: pymysql.Connection[Any]
    flavor: Flavor = "mysql"
    version: str = ""
    rows_read: int = 0
    queries: int = 0
    query_s: float = 0.0
    behind: bool = False
    """The last wait for a master's position timed out (see wait_for)."""

    def query(self, sql: str, doing: str = "a query") -> list[Row]:
        t0 = time.perf_counter()
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql)
                rows: list[Row] = list(cur.fetchall())
        except pymysql.MySQLError as e:
            raise audit_error(e, self.endpoint, self.side, doing) from None
        self.query_s += time.perf_counter() - t0
        self.queries += 1
        self.rows_read += len(rows)
        return rows

    def stream(self, sql: str, doing: str = "a query", batch: int = 5000) -> Iterator[list[Row]]:
        """Rows in batches through an unbuffered cursor: memory bounded by `batch` whatever the range."""
        try:
            with self.conn.cursor(pymysql.cursors.SSCursor) as cur:
                cur.execute(sql)
                while rows := cur.fetchmany(batch):
                    self.rows_read += len(rows)
                    yield list(rows)
        except pymysql.MySQLError as e:
            raise audit_error(e, self.endpoint, self.side, doing) from None

    def start_stream(self, sql: str, doing: str = "a query", batch: int = 5000) -> Iterator[Row]:
        """Send `sql` now (so that both sides can work at once) and return its rows as an iterator."""
        cur = self.conn.cursor(pymysql.cursors.SSCursor)
        try:
            cur.execute(sql)
        except pymysql.MySQLError as e:
            cur.close()
            raise audit_error(e, self.endpoint, self.side, doing) from None

        def rows() -> Iterator[Row]:
            try:
                while chunk := cur.fetchmany(batch):
                    self.rows_read += len(chunk)
                    yield from chunk
            except pymysql.MySQLError as e:
                raise audit_error(e, self.endpoint, self.side, doing) from None
            finally:
                cur.close()

        return rows()

    def one(self, sql: str, doing: str = "a query") -> Row | None:
        rows = self.query(sql, doing)
        return rows[0] if rows else None

    def text(self, sql: str, doing: str = "a query") -> str:
        row = self.one(sql, doing)
        value = row[0] if row else None
        return value.decode() if value is not None else ""

    def identity(self) -> str | None:
        """What the server says identifies it: MySQL's `server_uuid`, MariaDB's `server_uid` (a hash of the
        host's hardware address and the server's port); None where neither is shown."""
        row = self.one(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('server_uuid', 'server_uid')", "reading the server's id"
        )
        return row[1].decode() if row and row[1] else None

    def dicts(self, sql: str, doing: str) -> list[dict[str, str | None]]:
        """Rows as {column: text}, for status commands."""
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql)
                names = [d[0] for d in cur.description or ()]
                return [
                    {
                        n: (v.decode(errors="replace") if isinstance(v, bytes) else v)
                        for n, v in zip(names, r, strict=True)
                    }
                    for r in cur.fetchall()
                ]
        except pymysql.MySQLError as e:
            raise audit_error(e, self.endpoint, self.side, doing) from None

    def begin(self) -> None:
        """Open one consistent, read-only InnoDB snapshot for the statements that follow (until end())."""
        self.query(START_SNAPSHOT, "starting a consistent snapshot")

    def end(self) -> None:
        try:
            self.conn.query("COMMIT")
        except pymysql.MySQLError:
            pass  # a broken session fails its next statement, which says why

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        self.begin()
        try:
            yield
        finally:
            self.end()

    def gtid_position(self) -> str:
        """What this server has executed: gtid_binlog_pos (MariaDB) or gtid_executed (MySQL)."""
        var = "@@GLOBAL.gtid_binlog_pos" if self.flavor == "mariadb" else "@@GLOBAL.gtid_executed"
        return self.text(f"SELECT {var}", "reading the GTID position")

    def wait_for(self, position: str, timeout_s: float) -> bool:
        """Until this replica has applied `position` (MASTER_GTID_WAIT / WAIT_FOR_EXECUTED_GTID_SET).

        After a wait that timed out, the next ones wait at most a second, until one is reached: a stopped
        or far-behind replica would otherwise cost the whole `timeout_s` per chunk and per recheck batch,
        every one of them ending the same way."""
        if not position:
            return True
        from audit.sources.mysql.sql import literal

        bound = min(1.0, timeout_s) if self.behind else timeout_s
        if self.flavor == "mariadb":
            sql = f"SELECT MASTER_GTID_WAIT({literal(position)}, {bound:.3f})"
            reached = self.text(sql, "waiting for the replica to reach the master's GTID position") == "0"
        else:
            sql = f"SELECT WAIT_FOR_EXECUTED_GTID_SET({literal(position)}, {bound:.3f})"
            reached = self.text(sql, "waiting for the replica to reach the master's GTID set") == "0"
        self.behind = not reached
        return reached

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:  # closing a dead socket must not hide the real error
            pass


def connect(endpoint: MySQLEndpoint, side: str, *, read_timeout_s: float = 600.0) -> Server:
    """A read-only session on `endpoint`; SourceConnectError naming host:port when it cannot be had.

    The handshake (greeting and authentication) is bounded as the mysql client bounds it, by the connect
    timeout (at least HANDSHAKE_MIN_S): a port where a server of another protocol listens says nothing,
    and the session's read timeout (up to 10 minutes) was spent waiting for a greeting that never came."""
    handshake_s = max(endpoint.connect_timeout_s, HANDSHAKE_MIN_S)
    ssl = {k: v for k, v in (("ca", endpoint.ssl_ca), ("cert", endpoint.ssl_cert), ("key", endpoint.ssl_key)) if v}
    try:
        conn = pymysql.connect(
            host=endpoint.host,
            port=endpoint.port,
            user=endpoint.user,
            # bytes: pymysql encodes a str password as latin-1, so 'é' was refused and an emoji crashed;
            # servers hash the UTF-8 bytes a utf8mb4 client's CREATE USER sent
            password=endpoint.password.get_secret_value().encode("utf-8"),
            charset="utf8mb4",
            use_unicode=False,
            conv={},
            autocommit=True,
            connect_timeout=endpoint.connect_timeout_s,
            read_timeout=handshake_s,
            ssl=ssl or None,
        )
    except pymysql.MySQLError as e:
        if _timed_out(e):
            raise SourceConnectError(
                f"{side} {endpoint.where}: no MySQL handshake within {handshake_s:g} s: is this port a MySQL or "
                "MariaDB server's? (another server, such as Redis, waits for the client to speak first)",
                where=endpoint.where,
            ) from None
        raise audit_error(e, endpoint, side, "connecting") from None
    except OSError as e:  # pymysql builds the TLS context first (ssl.SSLError): a file that is no certificate
        raise ConfigError(
            f"{side} {endpoint.shown}: the TLS options (ssl_ca, ssl_cert, ssl_key) do not load: {e}"
        ) from None
    conn._read_timeout = read_timeout_s  # pymysql re-arms its socket's timeout from this before each read
    server = Server(endpoint, side, conn)
    for statement in SESSION_SETUP:
        server.query(statement, "setting up a read-only session")
    version = server.text("SELECT VERSION()")
    server.version = version
    server.flavor = "mariadb" if "mariadb" in version.lower() else "mysql"
    return server


def connect_pair(
    master: MySQLEndpoint, replica: MySQLEndpoint, *, read_timeout_s: float = 600.0
) -> tuple[Server, Server]:
    m = connect(master, "master", read_timeout_s=read_timeout_s)
    try:
        r = connect(replica, "replica", read_timeout_s=read_timeout_s)
    except BaseException:
        m.close()
        raise
    if m.flavor != r.flavor:
        m.close()
        r.close()
        raise ConfigError(
            f"master {master.where} runs {m.version} and replica {replica.where} runs {r.version}: kind mysql "
            "compares MySQL with MySQL and MariaDB with MariaDB"
        )
    return m, r


def decode_texts(row: Sequence[bytes | None]) -> list[str | None]:
    return [v.decode(errors="replace") if v is not None else None for v in row]
