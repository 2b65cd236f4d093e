"""The embedded default history store: one SQLite file, in WAL mode so concurrent tasks can append.

WAL lets readers run while one writer appends; writers queue on the file lock for up to
:data:`BUSY_TIMEOUT_S`. WAL needs the file on a local disk (not NFS): when Airflow workers on several
machines share the output directory, use the MySQL store instead.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from audit.errors import ConfigError, SourceConnectError, SourceError
from audit.history.store import SqlHistory

DEFAULT_FILE_NAME = "history.sqlite"
"""Without a history URL the store is this file in the output directory: `<out>/history.sqlite`."""

BUSY_TIMEOUT_S = 30.0
"""How long an append waits for another writer holding the file before failing."""

PREFIX = "sqlite:///"

_DDL = (
    "CREATE TABLE IF NOT EXISTS history_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, started_at TEXT, ended_at TEXT, duration_s REAL, "
    "exit_code INTEGER, verdict TEXT, tool_version TEXT, inventory_digest TEXT, appended_at TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS runs_started_at ON runs (started_at)",
    "CREATE TABLE IF NOT EXISTS pair_results (run_id TEXT NOT NULL, pair TEXT NOT NULL, kind TEXT NOT NULL, "
    "status TEXT NOT NULL, divergences INTEGER NOT NULL, counts TEXT NOT NULL, diagnoses TEXT NOT NULL, "
    "failed_checks TEXT NOT NULL, durations TEXT NOT NULL, duration_s REAL, lag_bytes REAL, lag_seconds REAL, "
    "PRIMARY KEY (run_id, pair))",
    "CREATE INDEX IF NOT EXISTS pair_results_pair ON pair_results (pair)",
    "CREATE TABLE IF NOT EXISTS metrics (run_id TEXT NOT NULL, pair TEXT NOT NULL, metric TEXT NOT NULL, "
    "value REAL NOT NULL, PRIMARY KEY (run_id, pair, metric))",
    "CREATE INDEX IF NOT EXISTS metrics_pair_metric ON metrics (pair, metric)",
)


def sqlite_path(url: str) -> Path:
    """`sqlite:///rel/h.sqlite` is relative to the working directory, `sqlite:////abs/h.sqlite` absolute
    (SQLAlchemy's and Airflow's convention)."""
    if not url.startswith(PREFIX):
        raise ConfigError(
            f"history: {url!r} is not a SQLite URL; expected {SqliteHistory.URL_HELP} (three slashes, then the path)"
        )
    rest = url[len(PREFIX) :]
    if not rest or "?" in rest or "#" in rest:
        raise ConfigError(
            f"history: {url!r} needs a file path after {PREFIX} and no query, e.g. {SqliteHistory.URL_HELP}"
        )
    return Path(rest)


class SqliteHistory(SqlHistory):
    SCHEME = "sqlite"
    URL_HELP = "sqlite:////var/lib/replica-audit/history.sqlite"
    DDL = _DDL

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # the path is the mistake (a file where its directory should be): exit 2
            raise ConfigError(f"history store {self.path}: cannot create its directory: {e.strerror}") from None
        try:
            # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE), never opened behind our back
            self.conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
        except (OSError, sqlite3.Error) as e:
            raise SourceConnectError(f"history store {self.path}: cannot open: {e}", where=str(self.path)) from e
        self._init_schema()

    @classmethod
    def from_url(cls, url: str) -> SqliteHistory:
        return cls(sqlite_path(url))

    @classmethod
    def check_url(cls, url: str) -> None:
        sqlite_path(url)

    @classmethod
    def in_dir(cls, out: Path) -> SqliteHistory:
        """The default store of an output directory."""
        return cls(Path(out) / DEFAULT_FILE_NAME)

    @property
    def where(self) -> str:
        return str(self.path)

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as e:
            raise SourceError(f"history store {self.path}: {e}", where=str(self.path)) from e

    def _begin(self) -> None:
        # IMMEDIATE takes the write lock up front: two appenders queue instead of deadlocking on upgrade
        self.conn.execute("BEGIN IMMEDIATE")

    def _end_read(self) -> None:
        pass  # autocommit: a read holds no transaction
