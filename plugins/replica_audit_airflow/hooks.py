"""Hooks: an Airflow connection turned into what replica-audit takes (a URL or a path); secrets stay in Airflow.

| hook | connection type | gives |
|---|---|---|
| RedisAuditHook | `redis` (Redis and Pika) | `redis://user:pw@host:port` (`rediss://` with extra `{"ssl": true}`) |
| MySQLAuditHook | `mysql` | `mysql://user:pw@host:port[/schema]` |
| FileStoreAuditHook | `fs` | the path in extra `{"path": ...}` (Airflow's File connection) |

`airflow_conn_resolver` is the `resolver` the library takes for `conn:<id>` inventory endpoints; it
picks the hook by the connection's type.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from airflow.sdk.bases.hook import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException


def server_url(conn: Any, scheme: str, default_port: int, with_schema: bool) -> str:
    """`scheme://login:password@host:port[/schema]`, login and password percent-encoded."""
    login, password = quote(conn.login or "", safe=""), quote(conn.password or "", safe="")
    auth = f"{login}:{password}@" if password else (f"{login}@" if login else "")
    host = conn.host or "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6
    path = f"/{conn.schema}" if with_schema and conn.schema else ""
    return f"{scheme}://{auth}{host}:{conn.port or default_port}{path}"


class _AuditHook(BaseHook):
    conn_name_attr = "audit_conn_id"
    default_conn_name = ""

    def __init__(self, audit_conn_id: str | None = None) -> None:
        super().__init__()
        self.audit_conn_id = audit_conn_id or self.default_conn_name

    def get_conn(self) -> str:
        return self.endpoint(self.get_connection(self.audit_conn_id))

    @classmethod
    def endpoint(cls, conn: Any) -> str:
        raise NotImplementedError


class RedisAuditHook(_AuditHook):
    """A Redis or Pika server (Pika speaks the Redis protocol)."""

    default_conn_name = "redis_default"
    conn_type = "redis"
    hook_name = "replica-audit Redis/Pika"

    @classmethod
    def endpoint(cls, conn: Any) -> str:
        scheme = "rediss" if str(conn.extra_dejson.get("ssl", "")).lower() in ("true", "1", "yes") else "redis"
        return server_url(conn, scheme, 6379, with_schema=False)


class MySQLAuditHook(_AuditHook):
    """A MySQL or MariaDB server."""

    default_conn_name = "mysql_default"
    conn_type = "mysql"
    hook_name = "replica-audit MySQL"

    @classmethod
    def endpoint(cls, conn: Any) -> str:
        return server_url(conn, "mysql", 3306, with_schema=True)


class FileStoreAuditHook(_AuditHook):
    """A directory (Pika binlogs, a RocketMQ store) reachable from the workers."""

    default_conn_name = "fs_default"
    conn_type = "fs"
    hook_name = "replica-audit file store"

    @classmethod
    def endpoint(cls, conn: Any) -> str:
        path = conn.extra_dejson.get("path") or conn.host
        if not path:
            raise ValueError(f'connection {conn.conn_id}: a file-store connection needs extra {{"path": ...}}')
        return str(path)


HOOK_BY_CONN_TYPE: dict[str, type[_AuditHook]] = {
    "redis": RedisAuditHook,
    "pika": RedisAuditHook,
    "mysql": MySQLAuditHook,
    "mariadb": MySQLAuditHook,
    "fs": FileStoreAuditHook,
    "file": FileStoreAuditHook,
}
"""Connection type -> the hook that turns it into a replica-audit endpoint."""

AuditSourceHook = RedisAuditHook
"""The name earlier versions of this plugin exported."""


def airflow_conn_resolver(conn_id: str) -> str:
    """The `resolver` replica-audit's library takes: conn id -> URL (or path), by the connection's type.

    A missing connection or an unsupported type raises ConfigError: a configuration mistake, not
    something a retry fixes.
    """
    from audit import ConfigError

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise ConfigError(f"conn:{conn_id}: no such Airflow connection") from None
    hook: type[_AuditHook] | None = HOOK_BY_CONN_TYPE.get((conn.conn_type or "").lower())
    if hook is None:
        known = ", ".join(sorted(HOOK_BY_CONN_TYPE))
        raise ConfigError(
            f"conn:{conn_id}: connection type {conn.conn_type!r} is not one replica-audit reads (known: {known})"
        )
    try:
        return hook.endpoint(conn)
    except ValueError as e:
        raise ConfigError(str(e)) from None
