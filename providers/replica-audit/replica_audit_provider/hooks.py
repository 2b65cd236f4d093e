"""Hooks: an Airflow connection turned into what replica-audit takes (a URL or a path); secrets stay in Airflow.

| hook | connection type | gives | `test_connection()` (read-only) |
|---|---|---|---|
| RedisAuditHook | `replica_audit_redis` | `redis://user:pw@host:port` (`rediss://` with TLS) | PING, then INFO server |
| PikaAuditHook | `replica_audit_pika` | the same, default port 9221 | PING, then INFO server |
| MySQLAuditHook | `replica_audit_mysql` | `mysql://user:pw@host:port[/schema]` | SELECT VERSION() |
| RocketMQStoreHook | `replica_audit_rocketmq` | the store directory (extra `store_dir`) | its commit log is readable |

The connection forms (fields, labels, placeholders) are declared in :mod:`.get_provider_info`.
Connections of the official providers' types `redis`, `mysql` and `fs` resolve as before.

`airflow_conn_resolver` is the `resolver` the library takes for `conn:<id>` inventory endpoints; it
picks the mapping by the connection's type (see :mod:`audit.connections`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

from airflow.sdk.bases.hook import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from audit import connections as ac

TEST_TIMEOUT_S = 5.0
"""Connect and read timeout of `test_connection()`: the UI waits for it."""


def _endpoint(conn: Any) -> str:
    return ac.connection_endpoint(
        conn.conn_id,
        conn.conn_type,
        host=conn.host,
        port=conn.port,
        login=conn.login,
        password=conn.password,
        schema=conn.schema,
        # the extra as stored, not `extra_dejson`: that reads malformed JSON as {} (a traceback in the log),
        # which dropped a connection's TLS; audit.connections.extra_mapping refuses it, naming the connection
        extra=conn.extra,
    )


class _AuditHook(BaseHook):
    conn_name_attr = "audit_conn_id"
    default_conn_name: ClassVar[str]
    conn_type: ClassVar[str]
    hook_name: ClassVar[str]

    def __init__(self, audit_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.audit_conn_id = audit_conn_id or self.default_conn_name

    def get_conn(self) -> str:
        """The endpoint (URL with the secret, or a path): hand it to replica-audit, never log it."""
        return _endpoint(self.get_connection(self.audit_conn_id))

    @classmethod
    def endpoint(cls, conn: Any) -> str:
        return _endpoint(conn)

    def test_connection(self) -> tuple[bool, str]:
        """(True, what answered) or (False, why not); the UI shows the message, which never holds the password."""
        password = None
        try:
            password = self.get_connection(self.audit_conn_id).password
            return True, self._probe()
        except Exception as e:
            message = f"{type(e).__name__}: {e}"
            return False, message.replace(password, "***") if password else message

    def _probe(self) -> str:
        raise NotImplementedError


class RedisAuditHook(_AuditHook):
    """A Redis server (standalone, replica, or a cluster node)."""

    default_conn_name = "replica_audit_redis_default"
    conn_type = "replica_audit_redis"
    hook_name = "Redis (replica-audit)"

    def _probe(self) -> str:
        import redis

        from audit.urls import redact_url

        url = self.get_conn()
        client = redis.Redis.from_url(
            url, socket_timeout=TEST_TIMEOUT_S, socket_connect_timeout=TEST_TIMEOUT_S, protocol=2
        )
        try:
            client.ping()
            info = client.info("server")
        finally:
            client.close()
        answered = f"PING answered by {self._server(info)} at {redact_url(url)}"
        mode = info.get("redis_mode", "standalone")
        form = MODE_FORMS.get(str(mode))
        # A plain `conn:<id>` endpoint naming a sentinel or a cluster node is refused by the audit
        # (it would read one shard, or nothing): say in which form this connection is usable.
        return f"{answered}; it runs in {mode} mode: give it in an inventory as {form}" if form else answered

    @staticmethod
    def _server(info: dict[str, Any]) -> str:
        if "pika_version" in info:
            return f"Pika {info['pika_version']}"
        return f"Redis {info.get('redis_version', '?')}"


MODE_FORMS = {
    "sentinel": "{sentinels: [<host>:<port>, ...], service: <name>} (its address, not conn:<id>)",
    "cluster": "{url: conn:<id>, topology: cluster}",
}
"""How an inventory names a server of each mode other than standalone."""


class PikaAuditHook(RedisAuditHook):
    """A Pika server: it speaks the Redis protocol (RESP2); INFO tells its version."""

    default_conn_name = "replica_audit_pika_default"
    conn_type = "replica_audit_pika"
    hook_name = "Pika (replica-audit)"


class MySQLAuditHook(_AuditHook):
    """A MySQL or MariaDB server."""

    default_conn_name = "replica_audit_mysql_default"
    conn_type = "replica_audit_mysql"
    hook_name = "MySQL / MariaDB (replica-audit)"

    def _probe(self) -> str:
        """The audit's own session (the same URL, TLS options and read-only setup), so a connection that
        passes here is one the audit can use."""
        from audit.sources.mysql.client import connect
        from audit.sources.mysql.endpoint import MySQLEndpoint

        endpoint = MySQLEndpoint.from_url(self.get_conn(), f"conn:{self.audit_conn_id}")
        server = connect(endpoint, f"conn:{self.audit_conn_id}", read_timeout_s=TEST_TIMEOUT_S)
        try:
            version = server.version
        finally:
            server.close()
        tls = " over TLS" if endpoint.ssl_ca or endpoint.ssl_cert else ""
        return f"a read-only session{tls}: {version} at {endpoint.shown}"


class RocketMQStoreHook(_AuditHook):
    """A RocketMQ broker's store directory (and its broker log, haStatus output) reachable from the workers."""

    default_conn_name = "replica_audit_rocketmq_default"
    conn_type = "replica_audit_rocketmq"
    hook_name = "RocketMQ store (replica-audit)"

    def get_conn(self) -> str:
        """The store directory (`fields()` has the whole endpoint)."""
        return self.fields()["store_dir"]

    def fields(self) -> dict[str, str]:
        """`store_dir`, and `broker_log`, `ha_status`, `broker_status`, `ha_addr` when set: an inventory's RocketMQ
        endpoint."""
        conn = self.get_connection(self.audit_conn_id)
        return ac.store_fields(conn.conn_id, conn.conn_type or "", conn.host, conn.extra)

    def _probe(self) -> str:
        fields = self.fields()
        found = []
        for path in fields["store_dir"].split(";"):
            if not path.strip():
                raise ValueError(f"store_dir {fields['store_dir']!r} holds an empty path (a stray ';')")
            found.append(_commit_log_files(Path(path.strip())))
        for name in ("broker_log", "ha_status", "broker_status"):
            if name in fields and not (os.path.isfile(fields[name]) and os.access(fields[name], os.R_OK)):
                raise FileNotFoundError(f"{name} {fields[name]} is not a readable file")
        return f"store {fields['store_dir']}: {sum(found)} commit-log files readable"


def _commit_log_files(store: Path) -> int:
    """Commit-log files (20-digit names) under `store` (the store root or its commitlog/); errors name the path."""
    if not store.is_dir():
        raise FileNotFoundError(f"store_dir {store} is not a directory on this machine")
    directory = store / "commitlog" if (store / "commitlog").is_dir() else store
    files = [p for p in directory.iterdir() if p.name.isdigit() and len(p.name) == 20]
    unreadable = [p.name for p in files if not os.access(p, os.R_OK)]
    if unreadable:
        raise PermissionError(
            f"{directory}: {len(unreadable)} commit-log files are not readable ({unreadable[0]}, ...)"
        )
    if not files:
        raise FileNotFoundError(f"{directory} holds no commit-log files (20-digit names)")
    return len(files)


HOOKS: tuple[type[_AuditHook], ...] = (RedisAuditHook, PikaAuditHook, MySQLAuditHook, RocketMQStoreHook)
HOOK_BY_CONN_TYPE: dict[str, type[_AuditHook]] = {h.conn_type: h for h in HOOKS}
"""The provider's own connection types -> their hook."""


def airflow_conn_resolver(conn_id: str) -> str:
    """The `resolver` replica-audit's library takes: conn id -> URL (or path), by the connection's type.

    A missing connection or an unsupported type raises ConfigError: a configuration mistake, not
    something a retry fixes.
    """

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise _not_found(conn_id) from None
    return _endpoint(conn)


def _not_found(conn_id: str) -> Exception:
    """Airflow skips an `AIRFLOW_CONN_<ID>` it cannot read (a debug-level log line) and says the connection
    does not exist, so a typo in the variable read as "no such connection": read it as replica-audit
    reads it outside Airflow (audit.connections.env_conn_resolver) to name what is wrong in it."""
    from audit import ConfigError

    variable = f"AIRFLOW_CONN_{conn_id.upper()}"
    if not os.environ.get(variable):
        return ConfigError(f"conn:{conn_id}: no such Airflow connection")
    try:
        ac.env_conn_resolver(conn_id)
    except ConfigError as e:
        why = str(e).removeprefix(f"conn:{conn_id}: ")
        return ConfigError(
            f"conn:{conn_id}: Airflow could not read it: {why if variable in why else f'{variable}: {why}'}"
        )
    return ConfigError(f"conn:{conn_id}: Airflow could not read {variable} as a connection")
