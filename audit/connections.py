"""Airflow-style connection fields -> the endpoint an inventory takes (a URL or a store path). No Airflow import.

One mapping serves both resolvers of `conn:<id>`: the Airflow provider's hooks (connection objects from
Airflow) and, outside Airflow, `AIRFLOW_CONN_<ID>` in Airflow's JSON form. Each kind declares the
connection types it reads (`KindSpec.connection_types`: its own `replica_audit_<kind>` type, and the
official providers' types it keeps reading): a server type becomes `scheme://user:pw@host:port[/schema]`,
a store type the directory in its extra `store_dir` (or `path`, else the host).

Login and password are percent-encoded; the URL holds the secret, so hand it to a client only
(print it through :func:`audit.urls.redact_url`).
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from audit import urls
from audit.errors import ConfigError
from audit.kernel.kind import ConnKind, registered_kinds
from audit.urls import ConnResolver


def conn_types() -> dict[str, ConnKind]:
    """Connection type -> how it becomes an endpoint, from every registered kind (KindSpec.connection_types)."""
    found: dict[str, ConnKind] = {}
    for spec in registered_kinds().values():
        found.update(spec.connection_types)
    return found


STORE_FIELDS = ("store_dir", "broker_log", "ha_status", "broker_status", "ha_addr")
"""Extra fields of a file-store connection (a RocketMQ store; `store_dir` alone for Pika binlog directories)."""


def _true(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes", "on")


def extra_field(extra: Mapping[str, Any], conn_type: str, name: str) -> Any:
    """An extra field as the connection form stores it: plain, or prefixed `extra__<type>__<name>` (older forms)."""
    value = extra.get(name)
    return value if value not in (None, "") else extra.get(f"extra__{conn_type}__{name}")


def server_url(
    kind: ConnKind,
    *,
    host: str,
    port: int | None,
    login: str | None,
    password: str | None,
    schema: str | None,
    tls: bool,
) -> str:
    """`scheme://login:password@host:port[/schema]`, login and password percent-encoded, IPv6 hosts bracketed."""
    user, secret = quote(login or "", safe=""), quote(password or "", safe="")
    auth = f"{user}:{secret}@" if secret else (f"{user}@" if user else "")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    path = f"/{schema}" if kind.with_schema and schema else ""
    scheme = kind.scheme + ("s" if tls and kind.scheme == "redis" else "")
    return f"{scheme}://{auth}{host}:{port or kind.default_port}{path}"


def extra_mapping(conn_id: str, extra: Any) -> dict[str, Any]:
    """A connection's extra as a mapping: the JSON text Airflow stores (or a mapping already), None or empty
    for none. Text that is not JSON, or JSON other than an object, is refused naming the connection: Airflow
    reads either as no extra at all (logging a traceback), which silently dropped a MySQL connection's TLS
    files (the audit then logged in without TLS) and a Redis connection's `tls`. The text is not quoted in
    the message: an extra may hold secrets."""
    if extra is None or (isinstance(extra, str) and not extra.strip()):
        return {}
    if isinstance(extra, str):
        try:
            extra = json.loads(extra)
        except ValueError as e:
            where = f" ({e.msg}, character {e.pos + 1})" if isinstance(e, json.JSONDecodeError) else ""
            raise ConfigError(
                f"conn:{conn_id}: its extra is not JSON{where}: fix the connection's extra field"
            ) from None
    if not isinstance(extra, Mapping):
        raise ConfigError(
            f"conn:{conn_id}: its extra is a JSON {type(extra).__name__}, not an object: "
            'fix the connection\'s extra field (e.g. {"tls": true})'
        )
    return dict(extra)


def store_fields(
    conn_id: str, conn_type: str, host: str | None, extra: Mapping[str, Any] | str | None
) -> dict[str, str]:
    """The store connection's fields (`store_dir` always; `broker_log`, `ha_status`, `ha_addr` when set)."""
    extra = extra_mapping(conn_id, extra)
    fields = {name: str(v) for name in STORE_FIELDS if (v := extra_field(extra, conn_type, name)) not in (None, "")}
    store = fields.get("store_dir") or extra_field(extra, conn_type, "path") or host
    if not store:
        raise ConfigError(f'conn:{conn_id}: a file-store connection needs extra {{"store_dir": ...}} (or "path")')
    fields["store_dir"] = str(store)
    return fields


def store_endpoint_text(fields: Mapping[str, str]) -> str:
    """A store connection as one string: its directory alone, or, with more fields (a RocketMQ broker
    log, a saved haStatus), the mapping as JSON, which the store's kind reads back."""
    return fields["store_dir"] if set(fields) == {"store_dir"} else json.dumps(dict(fields), sort_keys=True)


def connection_endpoint(
    conn_id: str,
    conn_type: str | None,
    *,
    host: str | None = None,
    port: int | None = None,
    login: str | None = None,
    password: str | None = None,
    schema: str | None = None,
    extra: Mapping[str, Any] | str | None = None,
) -> str:
    """The endpoint string of a connection; ConfigError naming the connection for an unknown type, no path
    or an extra that is not a JSON object (:func:`extra_mapping`)."""
    ctype = (conn_type or "").lower()
    known = conn_types()
    kind = known.get(ctype)
    if kind is None:
        raise ConfigError(
            f"conn:{conn_id}: connection type {conn_type!r} is not one replica-audit reads "
            f"(known: {', '.join(sorted(known))})"
        )
    if kind.family == "store":
        return store_endpoint_text(store_fields(conn_id, ctype, host, extra))  # reads the extra itself
    extra = extra_mapping(conn_id, extra)
    host = _required_host(conn_id, host)
    _check_host(conn_id, host)
    port = _checked_port(conn_id, port)
    tls = _true(extra_field(extra, ctype, "tls")) or _true(extra_field(extra, ctype, "ssl"))
    url = server_url(kind, host=host, port=port, login=login, password=password, schema=schema, tls=tls)
    options = kind.url_options(ctype, extra) if kind.url_options else {}
    return f"{url}?{urlencode(options)}" if options else url


def _required_host(conn_id: str, host: str | None) -> str:
    """The connection's host; an empty one is refused: it was read as 127.0.0.1, an audit of a server
    nobody named (a local one if it happens to listen on the port, or a misleading "unreachable")."""
    if host is None or not host.strip():
        raise ConfigError(
            f"conn:{conn_id}: the connection has no host: fill in its host field "
            "(replica-audit never assumes localhost)"
        )
    return host.strip()


def _checked_port(conn_id: str, port: int | None) -> int | None:
    """An empty port is the kind's default (6379 Redis, 9221 Pika, 3306 MySQL, as each form shows);
    a port outside 1-65535 (0 included, which was silently the default) is refused, naming the field."""
    if port is not None and not 0 < port < 65536:
        raise ConfigError(f"conn:{conn_id}: port {port} is not a port number (1-65535; leave it empty for the default)")
    return port


def _check_host(conn_id: str, host: str) -> None:
    """A connection's host is a name or an address: a port, a scheme or a path there would be misread."""
    bare = host.strip("[]")
    try:
        ipaddress.ip_address(bare)
        return
    except ValueError:
        pass
    if any(c in host for c in "/@:?#[] "):
        raise ConfigError(
            f"conn:{conn_id}: host {host!r} is not a bare host name or address: "
            "the port goes in the port field, and no scheme, path or user belongs in the host"
        )


def endpoint_from_json(conn_id: str, conn: Mapping[str, Any]) -> str:
    """`AIRFLOW_CONN_<ID>` in Airflow's JSON form (`{"conn_type": ..., "host": ..., "extra": {...}}`) -> endpoint."""
    port = conn.get("port")
    try:
        port_number = int(port) if port not in (None, "") else None
    except (TypeError, ValueError):
        raise ConfigError(f"conn:{conn_id}: port {port!r} is not a number") from None
    text = {name: _text_field(conn_id, conn, name) for name in ("conn_type", "host", "login", "password", "schema")}
    return connection_endpoint(
        conn_id,
        text["conn_type"],
        host=text["host"],
        port=port_number,
        login=text["login"],
        password=text["password"],
        schema=text["schema"],
        extra=conn.get("extra"),
    )


def _text_field(conn_id: str, conn: Mapping[str, Any], name: str) -> str | None:
    """A text field of the JSON form, or None; a number, list or mapping there (`"password": ["..."]`) was
    a TypeError at the URL's quoting: exit 4 and a traceback. The value is not quoted: it may be the secret."""
    value = conn.get(name)
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(
        f"conn:{conn_id}: AIRFLOW_CONN_{conn_id.upper()}'s {name} is a JSON {type(value).__name__}, not text: "
        "write it as a JSON string"
    )


# --- outside Airflow: AIRFLOW_CONN_<ID> ----------------------------------------------------------------
_CONN_ENV = "AIRFLOW_CONN_{}"


def endpoint_url(value: Any, resolver: ConnResolver | None = None) -> str | None:
    """:func:`audit.urls.endpoint_url`, with `conn:<id>` read from AIRFLOW_CONN_<ID> when no `resolver` is
    given (outside Airflow). The real URL, secret included: only hand it to a client, never print it."""
    return urls.endpoint_url(value, resolver or env_conn_resolver)


def env_conn_resolver(conn_id: str) -> str:
    """Resolve `conn:<id>` outside Airflow from AIRFLOW_CONN_<ID>, the same variable Airflow reads."""
    value = os.environ.get(_CONN_ENV.format(conn_id.upper()))
    if not value:
        raise ConfigError(f"conn:{conn_id}: no Airflow connection (set {_CONN_ENV.format(conn_id.upper())})")
    if value.lstrip().startswith("{"):
        return _url_from_conn_json(conn_id, value)
    if value.startswith(_ENDPOINT_SCHEMES) or "://" not in value:
        return _with_host(conn_id, value)  # an endpoint as an inventory writes it (or a store's path)
    return _endpoint_from_conn_uri(conn_id, value)


def _with_host(conn_id: str, value: str) -> str:
    """An inventory-form URL given as a connection: `redis:///0` or `mysql://u@/db` would read as localhost."""
    scheme = value.partition("://")[0]
    if scheme in ("redis", "rediss", "mysql", "mariadb"):
        try:
            host = urlsplit(value).hostname
        except ValueError:
            return value  # a malformed URL: named by the URL check every endpoint gets (audit/urls.py)
        if not host:
            raise ConfigError(
                f"conn:{conn_id}: AIRFLOW_CONN_{conn_id.upper()} is a {scheme}:// URL with no host "
                "(replica-audit never assumes localhost)"
            )
    return value


_ENDPOINT_SCHEMES = ("redis://", "rediss://", "unix://", "mysql://", "mariadb://")
"""URLs an inventory takes as they are; any other `<type>://` is Airflow's URI form of a connection."""


def _endpoint_from_conn_uri(conn_id: str, value: str) -> str:
    """Airflow's URI form (`replica-audit-redis://:pw@host:6379`): the scheme is the connection type
    (`-` for `_`), the path the schema, the query the extra (or `__extra__` holding it as JSON)."""
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as e:
        raise ConfigError(f"conn:{conn_id}: AIRFLOW_CONN_{conn_id.upper()} is not a connection URI ({e})") from None
    query: dict[str, Any] = dict(parse_qsl(parts.query, keep_blank_values=True))
    extra = query["__extra__"] if "__extra__" in query else query  # JSON text: read by connection_endpoint
    return connection_endpoint(
        conn_id,
        parts.scheme.replace("-", "_"),
        host=unquote(parts.hostname) if parts.hostname else None,
        port=port,
        login=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        schema=unquote(parts.path.lstrip("/")) or None,
        extra=extra,
    )


def _url_from_conn_json(conn_id: str, value: str) -> str:
    """Airflow's JSON connection form -> endpoint, through the same table the provider's hooks use."""
    try:
        conn = json.loads(value)
    except json.JSONDecodeError:
        raise ConfigError(f"conn:{conn_id}: AIRFLOW_CONN_{conn_id.upper()} is not valid JSON") from None
    if not isinstance(conn, dict):
        raise ConfigError(f"conn:{conn_id}: AIRFLOW_CONN_{conn_id.upper()} must be a JSON object")
    return endpoint_from_json(conn_id, conn)
