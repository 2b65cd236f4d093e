"""Results history: each finished run appended to a store, so trends can be computed per pair.

    store = open_history(None, out=Path("/data/audit"))        # <out>/history.sqlite (the default)
    store = open_history("mysql://audit:pw@db:3306/replica_audit")
    store.append_run(Path("/data/audit") / run_id)              # idempotent by run_id
    store.pair_history("cache-main", limit=30)                  # verdicts, counts, lag, durations
    to_frame(store.metric_series("cache-main", "lag_bytes"))

Backends are a plain registry by URL scheme; each one describes itself (URL_HELP) and wraps its
driver's errors into :mod:`audit.errors` at its boundary.
"""

from __future__ import annotations

import os
from pathlib import Path

from audit.errors import ConfigError
from audit.history.mysql import MySQLHistory
from audit.history.record import PairRecord, RunRecord, read_run
from audit.history.sqlite import DEFAULT_FILE_NAME, SqliteHistory, sqlite_path
from audit.history.store import HistoryStore, SqlHistory, shown_url, to_frame
from audit.urls import ConnResolver, shown_server_url

HISTORY_BY_SCHEME: dict[str, type[SqlHistory]] = {
    SqliteHistory.SCHEME: SqliteHistory,
    MySQLHistory.SCHEME: MySQLHistory,
}
"""URL scheme -> backend. A backend imports its driver only when a store is opened."""

ENV_VAR = "REPLICA_AUDIT_HISTORY"
"""The environment variable the CLI reads the history URL from when `--history` is not given."""


def history_url(given: str | None) -> str | None:
    """The store a command uses: `given` (`--history`, an operator's argument), else $REPLICA_AUDIT_HISTORY;
    None means OUT's history.sqlite. A blank `given` counts as not given (a template that rendered empty)."""
    if given is not None and given.strip():
        return given
    return os.environ.get(ENV_VAR) or None


def missing_store(given: str | None) -> str | None:
    """The path of the SQLite store a command is given (`--history`, else $REPLICA_AUDIT_HISTORY) when no
    such file exists yet, else None. Opening it creates an empty store: a reader of the history (the daily
    report) then says that it holds no runs, not a quiet day's report of a mistyped path."""
    url = history_url(given)
    if url is None or not url.startswith(f"{SqliteHistory.SCHEME}:"):
        return None
    try:
        path = sqlite_path(url)
    except ConfigError:
        return None  # refused, naming it, when the store is opened
    return None if path.exists() else str(path)


def open_history(url: str | None, *, out: Path | None = None, resolver: ConnResolver | None = None) -> HistoryStore:
    """Open (creating tables if missing) the store at `url`; None means `<out>/history.sqlite`.

    `conn:<id>` names a connection (a `mysql` or `replica_audit_mysql` one, whose schema is the
    database), read by `resolver`, else from AIRFLOW_CONN_<ID>: the store's password then stays out
    of the environment variable and the DAG.

    Raises ConfigError for a malformed URL (the message names `history` and shows the URL redacted)
    and SourceConnectError when the store cannot be reached (naming host:port, never the password).
    """
    if url is None or not url.strip():
        if out is None:
            raise ConfigError(f"history: no URL and no output directory to put the default {DEFAULT_FILE_NAME} in")
        return SqliteHistory.in_dir(Path(out))
    backend, url = _backend(url, resolver)
    return backend.from_url(url)


def check_history_url(url: str | None, resolver: ConnResolver | None = None) -> None:
    """ConfigError for a URL :func:`open_history` would refuse, without opening the store: a command
    checks it (None: $REPLICA_AUDIT_HISTORY's) before it audits anything, not once the run is done."""
    given = history_url(url)
    if given is None or not given.strip():
        return
    try:
        backend, given = _backend(given, resolver)
        backend.check_url(given)
    except ConfigError as e:
        raise ConfigError(str(e) if given == url else f"{ENV_VAR}: {e}") from None


def _backend(url: str, resolver: ConnResolver | None) -> tuple[type[SqlHistory], str]:
    """The backend of a URL (a `conn:<id>` resolved first) and the URL it opens."""
    shown = shown_url
    if url.startswith("conn:"):
        from audit.connections import endpoint_url

        try:
            url = str(endpoint_url(url, resolver))
        except ConfigError as e:
            raise ConfigError(f"history: {e}") from None
        shown = shown_server_url  # a connection's value with no scheme may be just its password: never quoted
    scheme = url.split("://", 1)[0] if "://" in url else ""
    backend = HISTORY_BY_SCHEME.get(scheme)
    if backend is None:
        examples = "; ".join(b.URL_HELP for b in HISTORY_BY_SCHEME.values())
        raise ConfigError(f"history: unsupported URL {shown(url)!r} (expected one of: {examples})")
    return backend, url


__all__ = [
    "DEFAULT_FILE_NAME",
    "ENV_VAR",
    "HISTORY_BY_SCHEME",
    "HistoryStore",
    "MySQLHistory",
    "PairRecord",
    "RunRecord",
    "SqlHistory",
    "SqliteHistory",
    "check_history_url",
    "open_history",
    "read_run",
    "to_frame",
]
