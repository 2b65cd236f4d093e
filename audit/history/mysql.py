"""The production history store: a MySQL or MariaDB database, through pymysql.

`mysql://user:password@host:3306/dbname` (the database must exist; its tables are created when
missing). Optional query parameters: `connect_timeout` (seconds) and the TLS files `ssl_ca`,
`ssl_cert`, `ssl_key`. The password is percent-decoded and never appears in a message.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from audit import defaults
from audit.errors import ConfigError, SourceConnectError, SourceError
from audit.history.store import SqlHistory, shown_url
from audit.sources.mysql.endpoint import UNENCODED_HINT

DEFAULT_PORT = 3306

RETRY_ERRORS = (1205, 1213)
"""Lock wait timeout and deadlock: the append is retried (two tasks re-appending one run can collide)."""

APPEND_LOCK_WAIT_S = 60
"""How long an append waits for others to finish theirs (audit/history/store.py, _appending): well under
HISTORY_READ_TIMEOUT_S, which would otherwise end the wait as a lost connection."""

NOT_SUPPORTED = 1235
"""ER_NOT_SUPPORTED_YET: what MariaDB Galera answers GET_LOCK with (MDEV-30473)."""

CONNECTION_ERRORS = (2003, 2006, 2013)
"""Cannot connect, server gone, connection lost: reported as SourceConnectError."""

_TABLE = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
# utf8mb4_bin: keys compare byte for byte, as in SQLite (pair names and run ids are case-sensitive)
_DDL = (
    "CREATE TABLE IF NOT EXISTS history_meta (name VARCHAR(64) NOT NULL PRIMARY KEY, value VARCHAR(255) NOT NULL)"
    + _TABLE,
    "CREATE TABLE IF NOT EXISTS runs (run_id VARCHAR(191) NOT NULL PRIMARY KEY, started_at CHAR(20) NULL, "
    "ended_at CHAR(20) NULL, duration_s DOUBLE NULL, exit_code INT NULL, verdict VARCHAR(32) NULL, "
    "tool_version VARCHAR(64) NULL, inventory_digest VARCHAR(128) NULL, appended_at CHAR(20) NOT NULL, "
    "INDEX runs_started_at (started_at))" + _TABLE,
    "CREATE TABLE IF NOT EXISTS pair_results (run_id VARCHAR(191) NOT NULL, pair VARCHAR(100) NOT NULL, "
    "kind VARCHAR(32) NOT NULL, status VARCHAR(32) NOT NULL, divergences BIGINT NOT NULL, counts TEXT NOT NULL, "
    "diagnoses TEXT NOT NULL, failed_checks TEXT NOT NULL, durations TEXT NOT NULL, duration_s DOUBLE NULL, "
    "lag_bytes DOUBLE NULL, lag_seconds DOUBLE NULL, PRIMARY KEY (run_id, pair), "
    "INDEX pair_results_pair (pair))" + _TABLE,
    "CREATE TABLE IF NOT EXISTS metrics (run_id VARCHAR(191) NOT NULL, pair VARCHAR(100) NOT NULL, "
    "metric VARCHAR(191) NOT NULL, value DOUBLE NOT NULL, PRIMARY KEY (run_id, pair, metric), "
    "INDEX metrics_pair_metric (pair, metric))" + _TABLE,
)

_DB_NAME = re.compile(r"^[A-Za-z0-9_$-]{1,64}$")
_STR_PARAMS = ("ssl_ca", "ssl_cert", "ssl_key")


@dataclass(frozen=True)
class MySQLTarget:
    host: str
    port: int
    user: str
    password: str
    database: str
    options: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"


def parse_mysql_url(url: str) -> MySQLTarget:
    """Raises ConfigError naming the missing or bad part; the message shows the URL redacted."""
    shown = shown_url(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # not the parser's words: they quote the port it read, maybe part of a password
        raise ConfigError(
            f"history: {shown}: bad host or port ({UNENCODED_HINT}); expected {MySQLHistory.URL_HELP}"
        ) from None
    if parts.scheme != "mysql":
        raise ConfigError(f"history: {shown}: scheme must be mysql://")
    if not parts.hostname:
        raise ConfigError(f"history: {shown}: no host; expected {MySQLHistory.URL_HELP}")
    if not parts.username:
        raise ConfigError(f"history: {shown}: no user; expected {MySQLHistory.URL_HELP}")
    database = unquote(parts.path.lstrip("/"))
    if not _DB_NAME.match(database):
        raise ConfigError(
            f"history: {shown}: database name {database!r} missing or invalid (letters, digits, "
            f"_ $ -); expected {MySQLHistory.URL_HELP}"
        )
    options: dict[str, Any] = {"connect_timeout": defaults.CONNECT_TIMEOUT_S}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "connect_timeout":
            try:
                options[key] = float(value)
            except ValueError:
                raise ConfigError(f"history: {shown}: connect_timeout must be a number of seconds") from None
        elif key in _STR_PARAMS:
            options[key] = value
        else:
            known = ", ".join(("connect_timeout", *_STR_PARAMS))
            raise ConfigError(f"history: {shown}: unknown parameter {key!r} (known: {known})")
    return MySQLTarget(
        host=parts.hostname,
        port=port or DEFAULT_PORT,
        user=unquote(parts.username),
        password=unquote(parts.password or ""),
        database=database,
        options=options,
    )


def _refused(error: SourceError, code: int) -> bool:
    """Whether the driver error behind `error` (from _guard) is the server's error `code`."""
    cause = error.__cause__
    return cause is not None and bool(cause.args) and cause.args[0] == code


def _message(error: Exception, password: str) -> str:
    args = error.args
    text = str(args[1]) if len(args) >= 2 else str(error)
    return text.replace(password, "***") if password else text


class MySQLHistory(SqlHistory):
    SCHEME = "mysql"
    URL_HELP = "mysql://user:password@host:3306/dbname"
    DDL = _DDL
    PARAMSTYLE = "format"
    INSERT_IGNORE = "INSERT IGNORE"
    APPEND_ATTEMPTS = 3

    def __init__(self, target: MySQLTarget) -> None:
        import pymysql

        self.target = target
        try:
            self.conn = pymysql.connect(
                host=target.host,
                port=target.port,
                user=target.user,
                password=target.password,
                database=target.database,
                charset="utf8mb4",
                autocommit=False,
                read_timeout=defaults.HISTORY_READ_TIMEOUT_S,
                write_timeout=defaults.HISTORY_READ_TIMEOUT_S,
                **target.options,
            )
        except pymysql.err.MySQLError as e:
            raise SourceConnectError(
                f"history store mysql://{target.where}/{target.database}: cannot connect as {target.user}: "
                f"{_message(e, target.password)}",
                where=target.where,
            ) from e
        self._init_schema()

    @classmethod
    def from_url(cls, url: str) -> MySQLHistory:
        return cls(parse_mysql_url(url))

    @classmethod
    def check_url(cls, url: str) -> None:
        parse_mysql_url(url)

    @property
    def where(self) -> str:
        return f"{self.target.where}/{self.target.database}"

    @contextmanager
    def _guard(self) -> Iterator[None]:
        import pymysql

        try:
            self.conn.ping(reconnect=True)  # a long-lived store (an Airflow worker) outlives wait_timeout
            yield
        except pymysql.err.MySQLError as e:
            # `from e` keeps the driver error for _retryable; its text never holds the password
            error = SourceConnectError if e.args and e.args[0] in CONNECTION_ERRORS else SourceError
            raise error(
                f"history store mysql://{self.where}: {_message(e, self.target.password)}", where=self.target.where
            ) from e

    def _begin(self) -> None:
        self.conn.begin()

    def _retryable(self, error: BaseException) -> bool:
        return bool(error.args) and error.args[0] in RETRY_ERRORS

    @contextmanager
    def _appending(self) -> Iterator[None]:
        """Appenders take turns on a named lock of the store's database. In REPEATABLE READ each new run's
        DELETEs take gap locks where the others insert: reports of distinct runs appending at once
        deadlocked, and InnoDB failed some again on every retry (2 runs of 30 lost, 3 at a time)."""
        name = f"replica-audit history {self.target.database}"[:64]  # the server's limit for a lock name
        try:
            got = self._query("SELECT GET_LOCK(?, ?) AS got", [name, APPEND_LOCK_WAIT_S])[0]["got"]
        except SourceError as e:
            if not _refused(e, NOT_SUPPORTED):
                raise
            got = NOT_SUPPORTED
        if got == NOT_SUPPORTED:
            yield  # a Galera node refuses named locks: the appends' own retries are all there is
            return
        if got != 1:
            raise SourceError(
                f"history store mysql://{self.where}: other appends held its lock for {APPEND_LOCK_WAIT_S} s",
                where=self.target.where,
            )
        try:
            yield
        finally:
            with suppress(SourceError):  # a session lost meanwhile took its lock with it
                self._query("SELECT RELEASE_LOCK(?) AS released", [name])
