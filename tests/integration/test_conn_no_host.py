"""An Airflow connection with no host is a configuration error, never an audit of localhost.

Its empty host was read as 127.0.0.1: a Redis pair whose connection left the host out audited whatever
listened on that port of the worker (here a real redis-server, which passed), a MySQL one reported
127.0.0.1:3306 unreachable (exit 3, which Airflow retries). Each command that reads a connection
(`run`, `verify` of each server kind, `daily-report`'s history store) now exits 2 naming the
connection and its missing host, without a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.local.redis_server import RedisServer, free_port
from tests.integration.helpers import run_cli, write_inventory

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def local_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A server on 127.0.0.1 that nobody named: what an empty host used to audit."""
    server = RedisServer(free_port(), tmp_path_factory.mktemp("nobody-named")).start()
    server.client().set("k", "v")
    yield server
    server.stop()


def no_host_forms(conn_type: str, port: int, login: str = "", password: str = "Zq9pw") -> dict[str, str]:
    """The connection without a host in each form AIRFLOW_CONN_<ID> takes."""
    conn = {"conn_type": conn_type, "port": port, "login": login or None, "password": password or None}
    user = f"{login}:{password}" if password else login
    return {
        "json_without_host": json.dumps(conn),
        "json_empty_host": json.dumps({**conn, "host": ""}),
        "json_blank_host": json.dumps({**conn, "host": "  "}),
        "uri_without_host": f"{conn_type.replace('_', '-')}://{user}{'@' if user else ''}:{port}",
    }


def assert_refused_naming(err: str, conn_id: str) -> None:
    said = " ".join(err.split())
    assert f"conn:{conn_id}: the connection has no host" in said, said
    assert "Traceback" not in said and "Zq9pw" not in said


@pytest.mark.parametrize("form", ["json_without_host", "json_empty_host", "json_blank_host", "uri_without_host"])
def test_a_redis_pair_whose_connection_has_no_host_is_refused_not_audited_on_localhost(
    form: str,
    local_redis: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_CACHE_B", no_host_forms("replica_audit_redis", local_redis.port, password="")[form]
    )
    pair = {"name": "c", "kind": "redis", "master": local_redis.url, "replica": "conn:cache_b"}
    inv = write_inventory(tmp_path / "inv.yaml", [{**pair, "check_replication": False}])
    # before: exit 0, the local server audited against itself (passed)
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out"), "--quiet"], monkeypatch) == 2
    assert_refused_naming(capsys.readouterr().err, "cache_b")


@pytest.mark.parametrize(
    ("kind", "conn_type", "login"),
    [("redis", "redis", ""), ("pika", "replica_audit_pika", ""), ("mysql", "replica_audit_mysql", "auditor")],
)
def test_verify_of_each_server_kind_refuses_a_target_connection_without_host(
    kind: str,
    conn_type: str,
    login: str,
    local_redis: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    port = 3306 if kind == "mysql" else local_redis.port
    monkeypatch.setenv("AIRFLOW_CONN_NEW_SIDE", no_host_forms(conn_type, port, login)["json_without_host"])
    source = f"mysql://auditor:pw@127.0.0.1:{free_port()}" if kind == "mysql" else local_redis.url
    args = ["verify", "--kind", kind, "--source", source, "--target", "conn:new_side", "-o", str(tmp_path / "out")]
    assert run_cli(args, monkeypatch) == 2
    assert_refused_naming(capsys.readouterr().err, "new_side")


@pytest.mark.parametrize("value", ['{"conn_type": "mysql", "login": "a", "schema": "h"}', "mysql://a:Zq9pw@/h"])
def test_a_history_store_connection_without_host_is_refused(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_HIST", value)
    assert run_cli(["daily-report", "-o", str(tmp_path / "out"), "--history", "conn:hist"], monkeypatch) == 2
    said = " ".join(capsys.readouterr().err.split())
    assert "conn:hist" in said and "no host" in said and "Traceback" not in said and "Zq9pw" not in said, said
