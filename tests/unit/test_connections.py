"""audit/connections.py: an Airflow connection, in any of its forms, becomes the endpoint the audit reads."""

from __future__ import annotations

import json

import pytest

from audit.connections import connection_endpoint, env_conn_resolver
from audit.errors import ConfigError


@pytest.mark.parametrize(
    ("uri", "endpoint"),
    [
        ("replica-audit-redis://:pw%2F@127.0.0.1:16391", "redis://:pw%2F@127.0.0.1:16391"),
        ("replica-audit-redis://u:p@10.0.0.5:6380?tls=true", "rediss://u:p@10.0.0.5:6380"),
        ("replica-audit-pika://:p@10.0.0.6", "redis://:p@10.0.0.6:9221"),
        (
            "replica-audit-mysql://aud:pw@db.example:3307/shop?ssl_ca=%2Fetc%2Fca.pem",
            "mysql://aud:pw@db.example:3307/shop?ssl_ca=%2Fetc%2Fca.pem",
        ),
        ("replica-audit-rocketmq://?store_dir=%2Fdata%2Fstore", "/data/store"),
        ("redis://:p@h:1/2", "redis://:p@h:1/2"),  # an inventory's own URL is used as it is
        ("/data/rocketmq/store", "/data/rocketmq/store"),
    ],
)
def test_airflow_uri_form_outside_airflow_reads_as_airflow_reads_it(
    monkeypatch: pytest.MonkeyPatch, uri: str, endpoint: str
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_X", uri)
    assert env_conn_resolver("x") == endpoint


def test_an_unknown_connection_type_in_uri_form_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_X", "http://h:1")
    with pytest.raises(ConfigError, match=r"conn:x: connection type 'http' is not one replica-audit reads"):
        env_conn_resolver("x")


@pytest.mark.parametrize(
    ("conn_type", "extra", "query"),
    [
        ("replica_audit_mysql", {"ssl_ca": "/ca.pem", "connect_timeout": 3}, "connect_timeout=3&ssl_ca=%2Fca.pem"),
        ("replica_audit_mysql", {"extra__replica_audit_mysql__ssl_key": "/k.pem"}, "ssl_key=%2Fk.pem"),
        (
            "mysql",
            {"ssl": {"ca": "/ca.pem", "cert": "/c.pem"}, "charset": "utf8"},
            "ssl_ca=%2Fca.pem&ssl_cert=%2Fc.pem",
        ),
        ("mysql", {"ssl": '{"ca": "/ca.pem"}'}, "ssl_ca=%2Fca.pem"),
        ("mariadb", {}, ""),
    ],
)
def test_a_mysql_connections_tls_and_timeout_reach_the_url(
    conn_type: str, extra: dict[str, object], query: str
) -> None:
    url = connection_endpoint("db", conn_type, host="h", port=3306, login="u", password="p", extra=extra)
    assert url == "mysql://u:p@h:3306" + (f"?{query}" if query else "")


@pytest.mark.parametrize("host", ["127.0.0.1/0", "127.0.0.1:16391", "redis://127.0.0.1", "user@h", "h 1"])
def test_a_host_field_holding_more_than_a_host_is_refused(host: str) -> None:
    with pytest.raises(ConfigError, match=r"conn:c: host .* the port goes in the port field"):
        connection_endpoint("c", "replica_audit_redis", host=host, port=6379)


@pytest.mark.parametrize(("host", "shown"), [("::1", "[::1]"), ("[::1]", "[::1]"), ("db-1.example", "db-1.example")])
def test_addresses_and_names_are_hosts(host: str, shown: str) -> None:
    assert connection_endpoint("c", "replica_audit_redis", host=host, port=1) == f"redis://{shown}:1"


@pytest.mark.parametrize(
    "conn_type", ["replica_audit_redis", "redis", "replica_audit_pika", "replica_audit_mysql", "mysql"]
)
@pytest.mark.parametrize("host", [None, "", "   "])
def test_a_server_connection_without_host_is_refused_naming_it(conn_type: str, host: str | None) -> None:
    # it was read as 127.0.0.1: an audit of whatever listens on the worker
    with pytest.raises(ConfigError, match=r"^conn:c: the connection has no host: fill in its host field"):
        connection_endpoint("c", conn_type, host=host, port=6379, login="u", password="p")


@pytest.mark.parametrize("port", [0, -1, 65536])
def test_a_port_outside_the_port_range_is_refused_and_an_empty_one_is_the_kinds_default(port: int) -> None:
    with pytest.raises(ConfigError, match=rf"^conn:c: port {port} is not a port number"):
        connection_endpoint("c", "replica_audit_redis", host="h", port=port)
    assert connection_endpoint("c", "replica_audit_pika", host="h") == "redis://h:9221"
    assert connection_endpoint("c", "mysql", host="h", login="u") == "mysql://u@h:3306"


@pytest.mark.parametrize("value", ["redis:///0", "rediss://:pw@:6380", "mysql://u:pw@/db", "mariadb://u@:3307"])
def test_an_inventory_url_without_host_given_as_a_connection_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_X", value)
    with pytest.raises(ConfigError, match=r"^conn:x: AIRFLOW_CONN_X is a \w+:// URL with no host"):
        env_conn_resolver("x")


BAD_JSON = '{"ssl_ca": "/ca.pem",}'


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (BAD_JSON, r"its extra is not JSON \(Expecting property name .*character 22\)"),
        ("{'tls': true}", r"its extra is not JSON \("),
        ("[1]", r"its extra is a JSON list, not an object"),
        ("true", r"its extra is a JSON bool, not an object"),
        (["ssl_ca"], r"its extra is a JSON list, not an object"),
    ],
)
@pytest.mark.parametrize("conn_type", ["replica_audit_mysql", "replica_audit_redis", "replica_audit_rocketmq"])
def test_an_extra_that_is_not_a_json_object_is_refused_naming_the_connection(
    conn_type: str, extra: object, said: str
) -> None:
    # Airflow reads such an extra as {}: the audit then logged in without the TLS the extra asked for
    with pytest.raises(ConfigError, match=rf"^conn:c: {said}"):
        connection_endpoint("c", conn_type, host="h", port=1, login="u", password="pw", extra=extra)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    [
        json.dumps({"conn_type": "replica_audit_mysql", "host": "h", "password": "pw", "extra": BAD_JSON}),
        '{"conn_type": "replica_audit_redis", "host": "h", "extra": [1]}',
        "replica-audit-mysql://u:pw@h:3306?__extra__=%7B%22ssl_ca%22%3A",
        "replica-audit-redis://u:pw@h:6379?__extra__=%5B1%5D",
    ],
)
def test_an_environment_connections_bad_extra_is_refused_in_either_form(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_X", value)
    with pytest.raises(ConfigError, match=r"^conn:x: its extra is (not JSON|a JSON list)") as raised:
        env_conn_resolver("x")
    assert "pw" not in str(raised.value) and "ca.pem" not in str(raised.value)


def test_an_empty_extra_is_no_extra() -> None:
    for extra in (None, "", "  ", "{}", {}):
        assert connection_endpoint("c", "replica_audit_redis", host="h", port=1, extra=extra) == "redis://h:1"


@pytest.mark.parametrize("field", ["password", "login", "host", "conn_type"])
def test_a_json_field_that_is_not_text_is_refused_naming_it(field: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # `"password": ["..."]` was a TypeError when the URL was quoted: exit 4, a traceback
    conn = {"conn_type": "redis", "host": "h", "login": "u", "password": "pw", field: ["s3cretpw"]}
    monkeypatch.setenv("AIRFLOW_CONN_SIDE", json.dumps(conn))
    with pytest.raises(ConfigError, match=f"conn:side: AIRFLOW_CONN_SIDE's {field} is a JSON list, not text") as e:
        env_conn_resolver("side")
    assert "s3cretpw" not in str(e.value)
