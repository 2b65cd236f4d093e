"""The history store contract on a real MariaDB server (started on loopback), plus its connection errors."""

from __future__ import annotations

import json
import secrets
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit import defaults
from audit.errors import AuditError, ConfigError, SourceConnectError
from audit.history import HistoryStore, MySQLHistory, open_history
from audit.local.mariadb_server import MariaDBServer, free_port, mariadb_available
from audit.local.redis_server import RedisServer
from tests.unit.test_history_sqlite import HistoryContract, build_runs

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not mariadb_available(), reason="mariadbd / mariadb-install-db not installed (apt-get install mariadb-server)"
    ),
]


@pytest.fixture(scope="module")
def mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    server = MariaDBServer(free_port(), tmp_path_factory.mktemp("mariadb")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_runs(tmp_path_factory.mktemp("runs"))


@pytest.fixture()
def database(mariadb: MariaDBServer) -> Iterator[str]:
    """An empty database of the test's own."""
    name = "history_" + secrets.token_hex(4)
    mariadb.execute(f"CREATE DATABASE {name}")
    yield name
    mariadb.execute(f"DROP DATABASE {name}")


class TestMySQLHistory(HistoryContract):
    @pytest.fixture()
    def store(self, mariadb: MariaDBServer, database: str) -> Iterator[HistoryStore]:
        s = open_history(mariadb.url(database))
        yield s
        s.close()

    @pytest.fixture()
    def reopen(self, mariadb: MariaDBServer, database: str) -> Any:
        return lambda: open_history(mariadb.url(database))


def test_tables_are_created_once_and_the_password_never_shows(mariadb: MariaDBServer, database: str) -> None:
    with open_history(mariadb.url(database)) as store, open_history(mariadb.url(database)):
        assert isinstance(store, MySQLHistory)
        assert store.where == f"127.0.0.1:{mariadb.port}/{database}" and mariadb.password not in repr(store)
    tables = {t for (t,) in mariadb.execute("SHOW TABLES", database=database)}
    assert tables == {"history_meta", "runs", "pair_results", "metrics"}
    assert mariadb.execute("SELECT value FROM history_meta", database=database) == [("1",)]


def test_unreachable_server_names_host_and_port_not_the_password() -> None:
    port = free_port()  # nothing listens there
    with pytest.raises(SourceConnectError) as e:
        open_history(f"mysql://auditor:S3cr%40t-pw@127.0.0.1:{port}/history?connect_timeout=2")
    assert f"127.0.0.1:{port}" in str(e.value) and e.value.where == f"127.0.0.1:{port}"
    assert "S3cr" not in str(e.value) and "S3cr" not in repr(e.value.__cause__)


@pytest.mark.timeout(60)
def test_a_port_where_another_server_listens_is_an_error_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --history mysql://... at a Redis port: pymysql waited for a MySQL greeting that never comes, and
    # the run never ended (no read timeout on the history store's connection)
    monkeypatch.setattr(defaults, "HISTORY_READ_TIMEOUT_S", 2.0)
    server = RedisServer(free_port(), tmp_path / "redis").start()
    try:
        with pytest.raises(SourceConnectError) as e:
            open_history(f"mysql://auditor:S3cr-pw@127.0.0.1:{server.port}/history")
        assert f"127.0.0.1:{server.port}" in str(e.value) and "S3cr-pw" not in str(e.value)
    finally:
        server.stop()


def test_wrong_password_and_unknown_database(mariadb: MariaDBServer, database: str) -> None:
    with pytest.raises(SourceConnectError) as e:
        open_history(f"mysql://audit:not-the-pw-42@127.0.0.1:{mariadb.port}/{database}")
    assert f"127.0.0.1:{mariadb.port}" in str(e.value) and "Access denied" in str(e.value)
    assert "not-the-pw-42" not in str(e.value)
    with pytest.raises(SourceConnectError, match="Unknown database 'nope'") as e:
        open_history(mariadb.url("nope"))
    assert mariadb.password not in str(e.value)


def test_mysql_and_sqlite_give_the_same_answers(
    mariadb: MariaDBServer, database: str, tmp_path: Path, runs_dir: dict[str, Path]
) -> None:
    with open_history(mariadb.url(database)) as mysql, open_history(f"sqlite:///{tmp_path}/h.sqlite") as lite:
        for store in (mysql, lite):
            for name in ("r1", "r2", "r3"):
                store.append_run(runs_dir[name])

        def same(query: Any) -> None:
            a, b = query(mysql), query(lite)
            for row in (*a, *b):
                row.pop("appended_at", None)
            assert a == b

        same(lambda s: s.runs())
        for pair in ("cache", "sessions"):
            same(lambda s, p=pair: s.pair_history(p))
            same(lambda s, p=pair: s.category_series(p))
            same(lambda s, p=pair: s.metric_series(p, "master_keys"))


def test_a_connection_names_the_store_without_its_password_in_the_variable(
    mariadb: MariaDBServer, database: str, monkeypatch: pytest.MonkeyPatch, runs_dir: dict[str, Path]
) -> None:
    conn = {
        "conn_type": "mysql",
        "host": "127.0.0.1",
        "port": mariadb.port,
        "login": mariadb.user,
        "password": mariadb.password,
        "schema": database,
        "extra": {"connect_timeout": 3},
    }
    monkeypatch.setenv("AIRFLOW_CONN_HISTORY_DB", json.dumps(conn))
    with open_history("conn:history_db") as store:
        assert isinstance(store, MySQLHistory) and store.where == f"127.0.0.1:{mariadb.port}/{database}"
        store.append_run(runs_dir["r1"])
    assert mariadb.execute("SELECT run_id FROM runs", database=database) == [("r1",)]
    with pytest.raises(ConfigError, match=r"history: conn:nope: no Airflow connection"):
        open_history("conn:nope")


def _copies(run: Path, where: Path, n: int) -> list[Path]:
    """`n` runs like `run`, each under a run id of its own, as distinct audits' reports append them."""
    copies = []
    for i in range(n):
        copy = where / f"20261127T2300{i:02d}Z-{i:04x}"
        shutil.copytree(run, copy)
        for name in ("manifest.json", "summary.json"):
            path = copy / name
            path.write_text(json.dumps({**json.loads(path.read_text()), "run_id": copy.name}))
        copies.append(copy)
    return copies


def test_runs_appended_at_the_same_moment_are_all_kept(
    mariadb: MariaDBServer, database: str, runs_dir: dict[str, Path], tmp_path: Path
) -> None:
    """Reports of distinct runs (several DAGs, or OUT directories, sharing one store) appending at once.
    Run ids grow with time, so each new run's first DELETE locked the same gap at the end of the index and
    InnoDB broke the inserts' deadlocks by failing appends: 2 of 30 runs lost with 3 appenders, each
    retried twice, the history then missing runs that had happened."""
    open_history(mariadb.url(database)).close()  # the schema first, as a deployment's first run would
    appenders, rounds = 8, 4
    runs = _copies(runs_dir["r2"], tmp_path, appenders * rounds)
    errors: list[str] = []

    def append(run: Path, start: threading.Barrier) -> None:
        with open_history(mariadb.url(database)) as store:
            start.wait()
            try:
                store.append_run(run)
            except AuditError as e:
                errors.append(f"{run.name}: {e}")

    for r in range(rounds):
        start = threading.Barrier(appenders)
        threads = [threading.Thread(target=append, args=(run, start)) for run in runs[r::rounds]]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    with open_history(mariadb.url(database)) as store:
        assert sorted(r["run_id"] for r in store.runs()) == sorted(run.name for run in runs)
        assert len(store.pair_history("cache")) == len(runs)
