"""The history store: every run's results, appended once per run, queried per pair for trends.

Three tables, the same in every backend:

| table | key | columns |
|---|---|---|
| `runs` | run_id | started_at, ended_at, duration_s, exit_code, verdict, tool_version, inventory_digest |
| `pair_results` | run_id, pair | kind, status, divergences, counts, diagnoses, failed_checks, durations (the |
| | | last four JSON), duration_s, lag_bytes, lag_seconds |
| `metrics` | run_id, pair, metric | value (the rows of metrics.parquet) |

Appending is idempotent by run_id: the run's old rows are deleted and the new ones inserted in one
transaction, so re-appending a run (a retried Airflow task, a re-rendered report) replaces it.
Times are UTC text (`2026-11-21T22:32:59Z`), which sorts chronologically in SQL.

The query methods return plain dicts, oldest run first, `limit` keeping the most recent runs;
:func:`to_frame` turns them into a pandas DataFrame.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from audit.errors import ConfigError, SourceError
from audit.history.record import RunRecord, format_time, read_run
from audit.layout import utc_now_text
from audit.urls import redact_url

if TYPE_CHECKING:
    import pandas as pd

SCHEMA_VERSION = 1
"""Bumped when a table changes; a store written by a newer version is refused rather than misread."""

UNFINISHED_STATUSES = ("error", "incomplete")
"""Pair statuses whose counts are not a full audit: their category series values are None, not 0."""


@runtime_checkable
class HistoryStore(Protocol):
    """Where run results accumulate. Backends: :data:`audit.history.HISTORY_BY_SCHEME`."""

    @property
    def where(self) -> str:
        """The store's location for messages: a path, or host:port/db, never a password."""
        ...

    def append_run(self, run_dir: Path) -> int:
        """Record the finished run in DIR/<run_id>/ (replacing an earlier append of it); returns rows written."""
        ...

    def runs(self, limit: int | None = None, since: str | datetime | None = None) -> list[dict[str, Any]]: ...

    def pair_history(self, pair: str, limit: int | None = None) -> list[dict[str, Any]]: ...

    def metric_series(self, pair: str, metric: str) -> list[dict[str, Any]]: ...

    def category_series(self, pair: str) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...

    def __enter__(self) -> HistoryStore: ...

    def __exit__(self, *exc: object) -> None: ...


_PASSWORD = re.compile(r"(//[^:/@]*):.*@")


def shown_url(url: str) -> str:
    """A URL fit for a message: redact_url, or a plain masking of the password when the URL is too
    malformed to parse (redact_url raises ValueError on a non-numeric port)."""
    try:
        return redact_url(url)
    except ValueError:
        return _PASSWORD.sub(r"\1:***@", url)


def to_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Query results as a DataFrame (pandas imported only here)."""
    import pandas as pd

    return pd.DataFrame(list(rows))


_JSON_COLUMNS = ("counts", "diagnoses", "failed_checks", "durations")

_RUN_COLUMNS = (
    "run_id",
    "started_at",
    "ended_at",
    "duration_s",
    "exit_code",
    "verdict",
    "tool_version",
    "inventory_digest",
    "appended_at",
)
_PAIR_COLUMNS = (
    "run_id",
    "pair",
    "kind",
    "status",
    "divergences",
    "counts",
    "diagnoses",
    "failed_checks",
    "durations",
    "duration_s",
    "lag_bytes",
    "lag_seconds",
)


class SqlHistory(ABC):
    """The store over a DB-API connection. Subclasses give the DDL, the connection and error wrapping.

    One store object holds one connection: use one per thread or process (each Airflow task opens its own).

    SQL here is written with `?` placeholders; a backend whose driver wants `%s` sets PARAMSTYLE.
    """

    SCHEME: ClassVar[str]
    """URL scheme this backend is registered under."""
    URL_HELP: ClassVar[str]
    """One example URL, shown in configuration errors."""
    DDL: ClassVar[tuple[str, ...]]
    """CREATE TABLE/INDEX statements, each safe to run again on an existing store."""
    PARAMSTYLE: ClassVar[str] = "qmark"
    INSERT_IGNORE: ClassVar[str] = "INSERT OR IGNORE"
    """The dialect's insert that skips a row whose key exists."""
    APPEND_ATTEMPTS: ClassVar[int] = 1
    """How many times an append is tried when it loses a lock race (see the backend's _retryable)."""

    conn: Any

    @classmethod
    @abstractmethod
    def check_url(cls, url: str) -> None:
        """ConfigError for a URL of this scheme the backend could not open, without opening it."""

    @classmethod
    @abstractmethod
    def from_url(cls, url: str) -> SqlHistory:
        """Parse the URL (ConfigError naming the bad part) and connect (SourceConnectError)."""

    @property
    @abstractmethod
    def where(self) -> str: ...

    @abstractmethod
    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Translate the driver's errors into SourceError(where=...)."""
        yield

    @abstractmethod
    def _begin(self) -> None: ...

    def _retryable(self, error: BaseException) -> bool:
        return False

    @contextmanager
    def _appending(self) -> Iterator[None]:
        """Held around an append: where the backend's own locking lets appenders of distinct runs fail each
        other, it makes them take turns. Nothing here: SQLite's BEGIN IMMEDIATE already does."""
        yield

    # --- plumbing -----------------------------------------------------------------------------------
    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.PARAMSTYLE == "format" else sql

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._guard():
            cur = self.conn.cursor()
            try:
                cur.execute(self._sql(sql), tuple(params))
                names = [d[0] for d in cur.description]
                rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
            finally:
                cur.close()
            self._end_read()
        return rows

    def _end_read(self) -> None:
        """Close the implicit read transaction, so the next query sees other writers' commits."""
        self.conn.commit()

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        self._begin()
        cur = self.conn.cursor()
        try:
            yield cur
        except BaseException:
            self.conn.rollback()
            raise
        else:
            self.conn.commit()
        finally:
            cur.close()

    def _init_schema(self) -> None:
        """create_schema() for a constructor: the connection is closed if the store is refused."""
        try:
            self.create_schema()
        except BaseException:
            self.close()
            raise

    def create_schema(self) -> None:
        """Create the tables if missing (idempotent) and refuse a store written by a newer schema. A store
        that has them is only read here: a reader (the daily report, a report's charts) took the write lock
        to create them, and waited out another writer's (30 s on SQLite, whose WAL lets readers read) to
        fail with "database is locked"."""
        version = self._schema_version()
        if version is None:
            with self._guard(), self._transaction() as cur:
                for statement in self.DDL:
                    cur.execute(statement)
                # two first appenders may race here: the loser's insert is ignored, not an error
                cur.execute(
                    self._sql(f"{self.INSERT_IGNORE} INTO history_meta (name, value) VALUES (?, ?)"),
                    ("schema_version", str(SCHEMA_VERSION)),
                )
                cur.execute(self._sql("SELECT value FROM history_meta WHERE name = ?"), ("schema_version",))
                version = int(cur.fetchone()[0])
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"history store {self.where}: schema version {version} is newer than this "
                f"replica-audit's ({SCHEMA_VERSION}); upgrade replica-audit to append to it"
            )

    def _schema_version(self) -> int | None:
        """The store's schema version, None before its tables are created (its version is written last)."""
        try:
            rows = self._query("SELECT value FROM history_meta WHERE name = ?", ["schema_version"])
        except SourceError:
            return None  # no table yet; anything else, the creation below says
        return int(rows[0]["value"]) if rows else None

    # --- writing ------------------------------------------------------------------------------------
    def append_run(self, run_dir: Path) -> int:
        record = read_run(Path(run_dir))
        with self._appending():
            for attempt in range(self.APPEND_ATTEMPTS):
                try:
                    with self._guard(), self._transaction() as cur:
                        return self._write(cur, record)
                except Exception as e:
                    cause = e.__cause__ if e.__cause__ is not None else e
                    if attempt + 1 < self.APPEND_ATTEMPTS and self._retryable(cause):
                        continue
                    raise
        raise AssertionError("unreachable")

    def _write(self, cur: Any, record: RunRecord) -> int:
        kept = record.kept_pairs
        unless_kept = f" AND pair NOT IN ({', '.join('?' * len(kept))})" if kept else ""
        for table in ("metrics", "pair_results"):
            cur.execute(self._sql(f"DELETE FROM {table} WHERE run_id = ?{unless_kept}"), (record.run_id, *kept))
        cur.execute(self._sql("DELETE FROM runs WHERE run_id = ?"), (record.run_id,))
        run_row = (
            record.run_id,
            record.started_at,
            record.ended_at,
            record.duration_s,
            record.exit_code,
            record.verdict,
            record.tool_version,
            record.inventory_digest,
            utc_now_text(),
        )
        cur.execute(
            self._sql(f"INSERT INTO runs ({', '.join(_RUN_COLUMNS)}) VALUES ({', '.join('?' * len(_RUN_COLUMNS))})"),
            run_row,
        )
        pair_rows = [
            (
                record.run_id,
                p.pair,
                p.kind,
                p.status,
                p.divergences,
                json.dumps(p.counts),
                json.dumps(p.diagnoses),
                json.dumps(p.failed_checks),
                json.dumps(p.durations),
                p.duration_s,
                p.lag_bytes,
                p.lag_seconds,
            )
            for p in record.pairs
        ]
        if pair_rows:
            cur.executemany(
                self._sql(
                    f"INSERT INTO pair_results ({', '.join(_PAIR_COLUMNS)}) "
                    f"VALUES ({', '.join('?' * len(_PAIR_COLUMNS))})"
                ),
                pair_rows,
            )
        metric_rows = [(record.run_id, pair, metric, value) for pair, metric, value in record.metrics]
        if metric_rows:
            cur.executemany(
                self._sql("INSERT INTO metrics (run_id, pair, metric, value) VALUES (?, ?, ?, ?)"), metric_rows
            )
        return 1 + len(pair_rows) + len(metric_rows)

    # --- trends -------------------------------------------------------------------------------------
    @staticmethod
    def _recent(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Queries fetch newest first (so LIMIT keeps the most recent); callers get oldest first."""
        rows.reverse()
        return rows

    @staticmethod
    def _limit(limit: int | None) -> str:
        if limit is None:
            return ""
        if limit < 0:
            raise ConfigError(f"history limit: must be >= 0, got {limit}")
        return f" LIMIT {int(limit)}"

    def runs(self, limit: int | None = None, since: str | datetime | None = None) -> list[dict[str, Any]]:
        """Runs started at or after `since` (UTC), with how many pairs each recorded and how many diverged."""
        where, params = "", []
        if since is not None:
            where, params = " WHERE r.started_at >= ?", [format_time(since)]
        rows = self._query(
            f"SELECT {', '.join('r.' + c for c in _RUN_COLUMNS)}, "
            "(SELECT COUNT(*) FROM pair_results p WHERE p.run_id = r.run_id) AS pairs, "
            "(SELECT COUNT(*) FROM pair_results p WHERE p.run_id = r.run_id AND p.status <> 'passed') "
            "AS pairs_not_passed "
            f"FROM runs r{where} ORDER BY r.started_at DESC, r.run_id DESC{self._limit(limit)}",
            params,
        )
        for row in rows:
            row["pairs"], row["pairs_not_passed"] = int(row["pairs"]), int(row["pairs_not_passed"])
        return self._recent(rows)

    def pair_history(self, pair: str, limit: int | None = None) -> list[dict[str, Any]]:
        """Per run of the pair: status, divergences, counts per category, diagnoses, lag and durations."""
        columns = ", ".join("p." + c for c in _PAIR_COLUMNS if c != "run_id")
        rows = self._query(
            f"SELECT r.run_id, r.started_at, r.ended_at, {columns} FROM pair_results p "
            "JOIN runs r ON r.run_id = p.run_id WHERE p.pair = ? "
            f"ORDER BY r.started_at DESC, r.run_id DESC{self._limit(limit)}",
            [pair],
        )
        for row in rows:
            for c in _JSON_COLUMNS:
                row[c] = json.loads(row[c]) if row[c] else ({} if c != "failed_checks" else [])
            for c in ("duration_s", "lag_bytes", "lag_seconds"):
                row[c] = float(row[c]) if row[c] is not None else None
            row["divergences"] = int(row["divergences"])
        return self._recent(rows)

    def metric_series(self, pair: str, metric: str) -> list[dict[str, Any]]:
        """One metric of metrics.parquet (e.g. `lag_bytes`, `diff_s`, `findings_missing_on_replica`) over runs."""
        rows = self._query(
            "SELECT r.run_id, r.started_at, m.value FROM metrics m JOIN runs r ON r.run_id = m.run_id "
            "WHERE m.pair = ? AND m.metric = ? ORDER BY r.started_at DESC, r.run_id DESC",
            [pair, metric],
        )
        for row in rows:
            row["value"] = float(row["value"])
        return self._recent(rows)

    def category_series(self, pair: str) -> list[dict[str, Any]]:
        """Per run, one column per finding category ever seen for the pair: the count, 0 when absent.

        Runs where the pair did not finish (status error/incomplete) have None in every category.
        """
        history = self.pair_history(pair)
        categories = sorted({c for h in history for c in h["counts"]})
        series = []
        for h in history:
            finished = h["status"] not in UNFINISHED_STATUSES
            row: dict[str, Any] = {"run_id": h["run_id"], "started_at": h["started_at"], "status": h["status"]}
            row.update({c: int(h["counts"].get(c, 0)) if finished else None for c in categories})
            series.append(row)
        return series

    def close(self) -> None:
        """Close the connection; closing twice is harmless."""
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()

    def __enter__(self) -> SqlHistory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.where})"
