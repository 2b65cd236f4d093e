"""The provider's connection types, as Airflow sees them once the provider is installed (from its wheel).

Airflow finds each type's hook, its form (fields, labels, placeholders) and its `test_connection`,
which reaches a real redis-server, a Pika face over one, a real MariaDB and the real RocketMQ commit
log, read-only; a wrong password or a missing store fails with a message that names the problem and
never holds the password.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from audit.local.mariadb_server import MariaDBServer, mariadb_available
from audit.local.redis_sentinel import start_sentinel_group
from audit.local.redis_server import RedisServer, free_port
from tests.conftest import FIXTURES
from tests.pika_front import PikaFront

pytestmark = [pytest.mark.airflow, pytest.mark.integration]
TYPES = ("replica_audit_redis", "replica_audit_pika", "replica_audit_mysql", "replica_audit_rocketmq")
PASSWORD = "s3cr3t-Pw"


def in_installed_airflow(env: dict[str, str], code: str) -> Any:
    done = subprocess.run(
        [env["AIRFLOW_PYTHON"], "-c", "import json\n" + code],
        env=env,
        cwd=env["AIRFLOW_HOME"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_airflow_registers_the_connection_types_with_their_forms(airflow_env: dict[str, str]) -> None:
    found = in_installed_airflow(
        airflow_env,
        f"""
from airflow.providers_manager import ProvidersManager
pm = ProvidersManager()
hooks = {{t: pm.hooks[t] for t in {TYPES!r}}}
print(json.dumps({{
    "provider": pm.providers["airflow-provider-replica-audit"].version,
    "hooks": {{t: [h.hook_class_name, h.connection_testable, h.hook_name] for t, h in hooks.items()}},
    "widgets": sorted(k for k in pm.connection_form_widgets if "replica_audit" in k),
    "behaviours": {{t: pm.field_behaviours.get(t) for t in {TYPES!r}}},
}}))
""",
    )
    assert found["provider"] == "0.1.0"
    for conn_type, (hook, testable, name) in found["hooks"].items():
        assert hook.startswith("replica_audit_provider.hooks.") and testable and "(replica-audit)" in name, conn_type
    assert found["widgets"] == [
        "extra__replica_audit_mysql__connect_timeout",
        "extra__replica_audit_mysql__ssl_ca",
        "extra__replica_audit_mysql__ssl_cert",
        "extra__replica_audit_mysql__ssl_key",
        "extra__replica_audit_pika__tls",
        "extra__replica_audit_redis__tls",
        "extra__replica_audit_rocketmq__broker_log",
        "extra__replica_audit_rocketmq__broker_status",
        "extra__replica_audit_rocketmq__ha_addr",
        "extra__replica_audit_rocketmq__ha_status",
        "extra__replica_audit_rocketmq__store_dir",
    ]
    b = found["behaviours"]
    assert b["replica_audit_redis"]["placeholders"]["port"] == "6379"
    assert b["replica_audit_pika"]["placeholders"]["port"] == "9221"
    assert b["replica_audit_mysql"]["relabeling"]["schema"] == "Database (optional)"
    assert set(b["replica_audit_rocketmq"]["hidden_fields"]) == {"host", "port", "schema", "login", "password"}
    assert b["replica_audit_rocketmq"]["placeholders"]["extra__replica_audit_rocketmq__store_dir"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("provider-connections")
    redis_server = RedisServer(free_port(), work / "redis").start()
    redis_server.client().config_set("requirepass", PASSWORD)
    pika = PikaFront(redis_server.port, lambda: "# Replication(MASTER)\nrole:master\nconnected_slaves:0\n").start()
    mariadb = MariaDBServer(free_port(), work / "mariadb").start() if mariadb_available() else None
    store = work / "rmq" / "store"
    (store / "commitlog").mkdir(parents=True)
    shutil.copy(FIXTURES / "rocketmq" / "00000000000000000000", store / "commitlog")
    sentinels = start_sentinel_group(work / "sentinel")
    try:
        yield {"redis": redis_server, "pika": pika, "mariadb": mariadb, "store": store, "sentinels": sentinels}
    finally:
        sentinels.stop()
        pika.stop()
        redis_server.stop()
        if mariadb is not None:
            mariadb.stop()


def test_test_connection_reaches_each_kind_read_only(airflow_env: dict[str, str], servers: dict[str, Any]) -> None:
    redis_port, pika_port = servers["redis"].port, servers["pika"].port
    conns: dict[str, dict[str, Any]] = {
        "cache": {"conn_type": "replica_audit_redis", "host": "127.0.0.1", "port": redis_port, "password": PASSWORD},
        "cache_bad_pw": {
            "conn_type": "replica_audit_redis",
            "host": "127.0.0.1",
            "port": redis_port,
            "password": "not-" + PASSWORD,
        },
        "cache_down": {"conn_type": "replica_audit_redis", "host": "127.0.0.1", "port": free_port()},
        "pika": {"conn_type": "replica_audit_pika", "host": "127.0.0.1", "port": pika_port, "password": PASSWORD},
        "store": {"conn_type": "replica_audit_rocketmq", "extra": {"store_dir": str(servers["store"])}},
        "store_missing": {"conn_type": "replica_audit_rocketmq", "extra": {"store_dir": "/nonexistent/store"}},
        "store_bad_log": {
            "conn_type": "replica_audit_rocketmq",
            "extra": {"store_dir": str(servers["store"]), "broker_log": "/nonexistent/broker.log"},
        },
        "store_log_is_dir": {
            "conn_type": "replica_audit_rocketmq",
            "extra": {"store_dir": str(servers["store"]), "broker_log": str(servers["store"])},
        },
        "store_stray_sep": {"conn_type": "replica_audit_rocketmq", "extra": {"store_dir": f"{servers['store']};"}},
        "sentinel": {
            "conn_type": "replica_audit_redis",
            "host": "127.0.0.1",
            "port": int(servers["sentinels"].sentinel_addresses[0].rsplit(":", 1)[1]),
        },
        "host_with_port": {"conn_type": "replica_audit_redis", "host": f"127.0.0.1:{redis_port}"},
        # no host was read as 127.0.0.1: this test then reached the local redis-server and passed
        "cache_no_host": {"conn_type": "replica_audit_redis", "port": redis_port, "password": PASSWORD},
    }
    mariadb = servers["mariadb"]
    if mariadb is not None:
        db = {
            "conn_type": "replica_audit_mysql",
            "host": "127.0.0.1",
            "port": mariadb.port,
            "login": mariadb.user,
            "password": mariadb.password,
        }
        conns["db"] = db
        # the audit's own checks: a TLS file that is not there, no user, a schema that is not there
        conns["db_tls_missing"] = {**db, "extra": {"ssl_ca": "/nonexistent/ca.pem"}}
        conns["db_no_user"] = {**db, "login": None}
        conns["db_unknown_schema"] = {**db, "schema": "not_a_database"}
    env = dict(airflow_env, **{f"AIRFLOW_CONN_{k.upper()}": json.dumps(v) for k, v in conns.items()})
    admin = servers["redis"].client()
    admin.execute_command("AUTH", PASSWORD)
    admin.config_resetstat()
    results = in_installed_airflow(
        env,
        f"""
from airflow.models.connection import Connection
print(json.dumps({{i: list(Connection.get_connection_from_secrets(i).test_connection()) for i in {sorted(conns)!r}}}))
""",
    )
    assert results["cache"][0] is True and results["cache"][1].startswith("PING answered by Redis 7"), results
    assert f"127.0.0.1:{redis_port}" in results["cache"][1]
    assert results["pika"] == [True, f"PING answered by Pika 4.0.0 at redis://:***@127.0.0.1:{pika_port}"]
    ok, message = results["cache_bad_pw"]
    assert not ok and "password" in message.lower() and PASSWORD not in message, message
    assert not results["cache_down"][0] and "Connection refused" in results["cache_down"][1]
    assert results["store"] == [True, f"store {servers['store']}: 1 commit-log files readable"]
    assert results["store_missing"] == [
        False,
        "FileNotFoundError: store_dir /nonexistent/store is not a directory on this machine",
    ]
    assert results["store_bad_log"] == [
        False,
        "FileNotFoundError: broker_log /nonexistent/broker.log is not a readable file",
    ]
    assert results["store_log_is_dir"] == [
        False,
        f"FileNotFoundError: broker_log {servers['store']} is not a readable file",
    ]
    assert not results["store_stray_sep"][0] and "empty path" in results["store_stray_sep"][1]
    ok, message = results["sentinel"]
    assert ok and "sentinel mode" in message and "{sentinels: [<host>:<port>, ...], service: <name>}" in message
    ok, message = results["host_with_port"]
    assert not ok and "the port goes in the port field" in message, message
    ok, message = results["cache_no_host"]
    assert not ok and message.startswith("ConfigError: conn:cache_no_host: the connection has no host"), message
    if mariadb is not None:
        assert results["db"][0] is True and "MariaDB" in results["db"][1], results["db"]
        assert results["db"][1].startswith("a read-only session: "), results["db"]
        ok, message = results["db_tls_missing"]  # (the official type's {"ssl": ...}: tests/unit/test_connections.py)
        assert not ok and "ssl_ca=/nonexistent/ca.pem: no such readable file" in message, message
        ok, message = results["db_no_user"]
        assert not ok and "no user" in message, message
        assert results["db_unknown_schema"][0] is True  # the audit never selects a database
    assert all(PASSWORD not in message for _, message in results.values())
    # read-only: the Redis and Pika probes sent nothing but the handshake, PING and INFO
    used = {k.removeprefix("cmdstat_") for k in admin.info("commandstats")} - {"config|resetstat", "auth"}
    assert used <= {"ping", "info", "hello", "client|setinfo"}, used
