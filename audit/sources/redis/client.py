"""Connections to Redis-protocol servers (Redis, Pika), with driver errors wrapped at the boundary."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import redis

from audit import defaults
from audit.errors import ConfigError, SourceConnectError
from audit.sources.redis.endpoints import tls_files_problem, url_options_problem
from audit.sources.redis.info import parse_info
from audit.sources.redis.resp import RespPipe
from audit.urls import redact_url, shown_server_url


def host_port(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"


class ReadonlyRefused(redis.ResponseError):
    """The server refused READONLY (an ACL without +readonly), which `connect` names as such."""


def _readonly_on_connect(conn: Any) -> None:
    """redis-py's connection set-up (auth, SELECT), then READONLY: a cluster replica serves reads of
    its shard's keys only on a connection that said READONLY (others get MOVED to the master)."""
    conn.on_connect()
    conn.send_command("READONLY")
    try:
        conn.read_response()
    except redis.ResponseError as e:
        raise ReadonlyRefused(str(e)) from None


def _tls_on_connect(conn: Any) -> None:
    """redis-py's connection set-up, then one reply read back. A TLS 1.3 server sends its session tickets
    after the handshake; with no reply read during set-up (no AUTH, no CLIENT SETINFO) they are still
    unread when the pool checks the new connection, which it then drops as "Connection has data", and
    after one retry fails with "Connection not ready": a healthy server reported unreachable. DBSIZE
    (O(1)) is what a +@read user may run (not PING); a refusal is a reply read all the same."""
    conn.on_connect()
    conn.send_command("DBSIZE")
    try:
        conn.read_response()
    except redis.ResponseError:
        pass


def connect(
    url: str, *, role: str, timeout_s: float = defaults.CONNECT_TIMEOUT_S, readonly: bool = False
) -> redis.Redis:
    """A client speaking RESP2 (Pika cannot do HELLO 3), checked with one INFO call.

    redis-py's CLIENT SETINFO is switched off: a read-only ACL user may not run it, and Pika rejects it.
    With `readonly`, every connection of the client (RespPipe's too) sends READONLY (cluster nodes only).
    """
    if urlsplit(url).scheme not in ("redis", "rediss", "unix"):  # a conn:<id> of another kind's type
        raise ConfigError(
            f"{role}: {shown_server_url(url)} is not a Redis URL (expected redis://, rediss:// or unix://;"
            " a conn:<id> must be a Redis or Pika connection)"
        )
    problem = url_options_problem(url) or tls_files_problem(dict(parse_qsl(urlsplit(url).query)))
    if problem:
        raise ConfigError(f"{role} {redact_url(url)}: {problem}")
    extra: dict[str, Any] = {}
    if readonly:
        extra["redis_connect_func"] = _readonly_on_connect  # a reply read: TLS tickets drained too
    elif urlsplit(url).scheme == "rediss":
        extra["redis_connect_func"] = _tls_on_connect
    try:
        client = redis.Redis.from_url(
            url,
            protocol=2,
            socket_connect_timeout=timeout_s,
            socket_timeout=max(timeout_s, 30.0),
            lib_name=None,
            lib_version=None,
            decode_responses=False,
            **extra,
        )
        try:
            client.execute_command("INFO", "server")
        except BaseException:
            client.close()  # a refused INFO left its connection open, for as long as the error was kept
            raise
    except redis.AuthenticationError as e:
        where = host_port(url)
        raise SourceConnectError(f"{role} {redact_url(url)}: authentication failed ({e})", where=where) from None
    except redis.InvalidResponse as e:  # another protocol's bytes (a MySQL greeting, an HTTP reply)
        raise SourceConnectError(
            f"{role} {host_port(url)}: the server does not speak the Redis protocol ({e}); is the port right?",
            where=host_port(url),
        ) from None
    except redis.ResponseError as e:
        said = "READONLY" if isinstance(e, ReadonlyRefused) else "INFO"
        raise SourceConnectError(
            f"{role} {redact_url(url)}: server refused {said} ({e})", where=host_port(url)
        ) from None
    except (redis.ConnectionError, redis.TimeoutError, OSError, ValueError) as e:
        raise SourceConnectError(f"{role} {host_port(url)} unreachable: {e}", where=host_port(url)) from None
    return client


@contextmanager
def connected_sides(urls: Mapping[str, str], name: str) -> Iterator[dict[str, redis.Redis]]:
    """A client per side (:func:`connect`, role `<name> <side>`), every one closed on the way out, also
    when a later side cannot be had."""
    with ExitStack() as stack:
        yield {side: stack.enter_context(connect(url, role=f"{name} {side}")) for side, url in urls.items()}


def open_pipe(url: str, *, role: str, readonly: bool = False) -> RespPipe:
    """A :class:`RespPipe` to `url`'s server, checked as :func:`connect` checks it. The pipe has a
    connection of its own: the checking client is closed here, not left open beside the pipe."""
    with connect(url, role=role, readonly=readonly) as client:
        return RespPipe(client)


def info_text(client: redis.Redis, section: str) -> bytes:
    """Raw INFO text, so the parsers (and snapshot.json) see exactly what the server said."""
    conn = client.connection_pool.get_connection()
    try:
        conn.send_command("INFO", section)
        reply: Any = conn.read_response(disable_decoding=True)
    finally:
        client.connection_pool.release(conn)
    return bytes(reply) if reply is not None else b""


def server_run_id(client: redis.Redis) -> str | None:
    """The id a Redis or Pika server draws at its start (INFO server's `run_id`); None if INFO is refused."""
    try:
        run_id = parse_info(info_text(client, "server")).get("run_id")
    except redis.ResponseError:  # an ACL without INFO: no proof either way
        return None
    return str(run_id) if run_id else None


def client_list_text(client: redis.Redis) -> bytes | None:
    """Raw CLIENT LIST text, or None if the auditor's user may not run it."""
    conn = client.connection_pool.get_connection()
    try:
        conn.send_command("CLIENT", "LIST")
        reply: Any = conn.read_response(disable_decoding=True)
    except redis.ResponseError:
        return None
    finally:
        client.connection_pool.release(conn)
    return bytes(reply)
