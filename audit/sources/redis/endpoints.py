"""How a Redis pair names its servers: a standalone URL, a cluster seed, or a Sentinel service.

```yaml
master: redis://auditor:pw@10.0.0.5:6379                        # standalone (a plain URL, as before)
master: {url: redis://auditor:pw@10.0.0.5:7000, topology: cluster}  # any node: shards are discovered
master: {sentinels: ["10.0.0.1:26379", "redis://:spw@10.0.0.2:26379"], service: mymaster,
         username: auditor, password: pw}                     # the data nodes' credentials
master: {sentinels: ["rediss://10.0.0.1:26380?ssl_ca_certs=/etc/redis/ca.pem"], service: mymaster,
         ssl_ca_certs: /etc/redis/ca.pem,                     # the data nodes' CA: TLS to them
         ssl_certfile: /etc/redis/auditor.pem, ssl_keyfile: /etc/redis/auditor.key}  # mutual TLS
```

Credentials travel inside URLs (or `conn:<airflow_conn_id>`), held as ``SecretStr`` so that no repr,
log line or error shows them; a node discovered from a cluster seed is reached with the seed's scheme
and credentials (:func:`node_url`). :func:`parse_endpoint` turns an inventory value into one of the
models and raises :class:`~audit.errors.ConfigError` naming the field.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Iterable, Mapping
from typing import Any, Literal
from urllib.parse import quote, urlsplit, urlunsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from audit.connections import endpoint_url
from audit.errors import ConfigError
from audit.urls import ConnResolver, checked_url, redact_url

TopologyKind = Literal["standalone", "cluster", "sentinel"]
SCHEMES = ("redis", "rediss", "unix")
TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
"""A sentinel group's TLS files for its data nodes: redis-py's own option names, as a cluster seed's or
a sentinel's URL carries them (`?ssl_ca_certs=...`)."""


def unreadable_tls_file(files: Iterable[tuple[str, str | None]]) -> str | None:
    """`option path` of the first TLS file of `(option, path)` that is not a readable file, or None. One
    rule for a sentinel endpoint's fields and for any URL's options (`?ssl_ca_certs=...`)."""
    for option, path in files:
        if option in TLS_FILES and path is not None and not (os.path.isfile(path) and os.access(path, os.R_OK)):
            return f"{option} {path}"
    return None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_url(value: SecretStr) -> SecretStr:
    raw = value.get_secret_value()
    if raw.startswith("conn:"):
        if len(raw) == len("conn:"):
            raise ValueError("conn: needs an Airflow connection id")
        return value
    scheme = urlsplit(raw).scheme
    if scheme not in SCHEMES:
        raise ValueError(f"expected redis://, rediss:// or unix:// (or conn:<id>), got scheme {scheme or 'none'!r}")
    problem = address_problem(raw)
    if problem:
        raise ValueError(problem)
    return value


def address_problem(url: str) -> str | None:
    """What a redis://, rediss:// or unix:// URL lacks of an address, or None.

    redis-py reads `redis:///0` as localhost:6379: an audit of a server nobody named. A password typed
    with an unencoded "/", "?" or "#" is named as that first (it would read as a missing host).
    """
    try:
        checked_url(url)
    except ConfigError as e:
        return str(e)
    try:
        parts = urlsplit(url)
    except ValueError:
        return None  # a malformed address: named by the URL check every endpoint gets (audit/urls.py)
    if parts.scheme in ("redis", "rediss") and not parts.hostname:
        return f"{redact_url(url)}: no host; expected redis://host:port"
    if parts.scheme == "unix" and not parts.path:
        return f"{redact_url(url)}: no socket path; expected unix:///path/to/redis.sock"
    problem = url_options_problem(url)
    return f"{redact_url(url)}: {problem}" if problem else None


def url_options_problem(url: str) -> str | None:
    """What in `url` redis-py would not take, or None: a query option it does not know (`?foo=1` was a
    TypeError inside redis-py, reported as a bug), an option's value of the wrong type (reported as the
    server being unreachable), or a db in the path that is not a number (read as db 0)."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        return None  # conn:<id>: checked once resolved, when connected
    db = parts.path.strip("/")
    if parts.scheme != "unix" and db and not db.isdigit():
        return f"the db in the path must be a number, got {db!r}"
    import redis  # here: the inventory imports this module, and needs no client to validate

    try:  # builds the connection object only: nothing is connected
        redis.ConnectionPool.from_url(url).make_connection()
    except TypeError as e:  # "...got an unexpected keyword argument 'foo'": the option's name only
        name = str(e).rpartition(" ")[2]
        hint = ": a TLS option, for a rediss:// URL" if name.startswith("'ssl") and parts.scheme != "rediss" else ""
        return f"unknown URL option {name}{hint}"
    except (ValueError, redis.RedisError) as e:  # "Invalid value for 'socket_timeout' in connection URL."
        return f"a URL option's value is not one redis-py takes: {e}"
    return None


class NodeEndpoint(_Strict):
    """One server URL: the server itself (standalone), or any node of a cluster (cluster)."""

    url: SecretStr
    topology: Literal["standalone", "cluster"] = "standalone"

    _url_ok = field_validator("url")(_check_url)

    @model_validator(mode="after")
    def _no_unix_cluster(self) -> NodeEndpoint:
        if self.topology == "cluster" and self.url.get_secret_value().startswith("unix:"):
            raise ValueError("topology: cluster needs a TCP node (redis:// or rediss://): nodes announce host:port")
        return self

    def display(self) -> str:
        """What the summary shows (audit.kernel.pair.display_endpoint calls it): never a password."""
        return display(self)

    def resolve(self, resolver: ConnResolver | None = None) -> str:
        """The real URL (secret included): hand it to a client, never print it. `conn:<id>` without a
        resolver is read from AIRFLOW_CONN_<ID>."""
        url = endpoint_url(self.url, resolver)
        assert url is not None
        return url


class SentinelEndpoint(_Strict):
    """A Sentinel-managed group: the sentinels are asked, in order, for `service`'s master and replicas."""

    sentinels: list[SecretStr] = Field(min_length=1, description="host:port, or redis://[user:pw@]host:port")
    service: str = Field(min_length=1)
    username: str | None = Field(None, description="the data nodes' user (the sentinels' go in their URLs)")
    password: SecretStr | None = None
    tls: bool = Field(False, description="rediss:// to the data nodes; implied by any of the TLS files")
    ssl_ca_certs: str | None = Field(None, min_length=1, description="the data nodes' CA (PEM), else the system's")
    ssl_certfile: str | None = Field(None, min_length=1, description="client certificate (PEM): mutual TLS")
    ssl_keyfile: str | None = Field(None, min_length=1, description="its private key, unless ssl_certfile holds it")
    topology: Literal["sentinel"] = "sentinel"

    @model_validator(mode="before")
    @classmethod
    def _files_imply_tls(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not any(data.get(f) is not None for f in TLS_FILES):
            return data
        given = [f for f in TLS_FILES if data.get(f) is not None]
        if data.get("tls", True) is False:
            raise ValueError(f"tls: false, but {', '.join(given)} given: those are TLS files (drop tls: false)")
        if data.get("ssl_keyfile") is not None and data.get("ssl_certfile") is None:
            raise ValueError("ssl_keyfile: needs ssl_certfile, the client certificate that key belongs to")
        return {**data, "tls": True}

    @field_validator("sentinels")
    @classmethod
    def _addresses(cls, sentinels: list[SecretStr]) -> list[SecretStr]:
        for s in sentinels:
            sentinel_url(s.get_secret_value())  # raises ValueError naming the entry (without credentials)
        return sentinels

    def display(self) -> str:
        """What the summary shows (audit.kernel.pair.display_endpoint calls it): never a password."""
        return display(self)

    def sentinel_urls(self) -> list[str]:
        """The sentinels' real URLs (credentials included): for connecting only."""
        return [sentinel_url(s.get_secret_value()) for s in self.sentinels]

    def node_url(self, host: str, port: int) -> str:
        """The URL of a data node the sentinels named, with this endpoint's credentials and TLS files."""
        scheme = "rediss" if self.tls else "redis"
        pw = self.password.get_secret_value() if self.password else None
        files = "&".join(f"{f}={quote(path, safe='/')}" for f in TLS_FILES if (path := getattr(self, f)) is not None)
        return _build(scheme, self.username, pw, host, port) + (f"?{files}" if files else "")

    def check_tls_files(self, where: str) -> None:
        """ConfigError naming the field when a TLS file cannot be read or does not load as PEM. Checked on
        the host that connects (an inventory is also read where the files are not), before any node is:
        a certificate that does not load would otherwise read as every data node being unreachable."""
        problem = tls_files_problem({f: getattr(self, f) for f in TLS_FILES})
        if problem:
            raise ConfigError(f"{where}: {problem}")


def tls_files_problem(files: Mapping[str, str | None]) -> str | None:
    """Why TLS files (`ssl_ca_certs`, `ssl_certfile`, `ssl_keyfile`, and `ssl_password` for the key) cannot be
    used, or None: a file that cannot be read, a CA file with no certificate, a certificate and key that do
    not load (PEM). One rule for a sentinel endpoint's fields and a URL's options (`?ssl_ca_certs=...`),
    checked before connecting: redis-py's error was "unreachable", exit 3, which Airflow retries."""
    missing = unreadable_tls_file(files.items())
    if missing:
        return f"{missing}: no such readable file"
    ca, cert, key = (files.get(f) for f in TLS_FILES)
    if ca is None and cert is None:
        return None  # no file to load (and the system's CAs are not read on every connection)
    try:
        context = ssl.create_default_context(cafile=ca)
    except ssl.SSLError as e:
        return f"ssl_ca_certs {ca}: no CA certificate (PEM) in it ({e})"
    if cert is not None:
        try:
            context.load_cert_chain(cert, key, password=files.get("ssl_password"))
        except ssl.SSLError as e:
            with_key = f" with ssl_keyfile {key}" if key else ""
            return f"ssl_certfile {cert}{with_key}: not a certificate and its key (PEM) ({e})"
    return None


RedisEndpoint = NodeEndpoint | SentinelEndpoint


def _build(scheme: str, user: str | None, password: str | None, host: str, port: int) -> str:
    auth = ""
    if user or password:
        auth = quote(user or "", safe="") + (f":{quote(password, safe='')}" if password else "") + "@"
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{auth}{shown}:{port}"


def sentinel_url(entry: str) -> str:
    """`host:port` -> `redis://host:port`; a URL stays as it is. ValueError for anything else."""
    url = entry if "://" in entry else f"redis://{entry}"
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme not in ("redis", "rediss") or not parts.hostname or port is None:
        shown = entry.split("@")[-1]
        raise ValueError(f"sentinel {shown!r}: expected host:port or redis://[user:pw@]host:port")
    return url


def node_url(seed_url: str, host: str, port: int) -> str:
    """The URL of another node of the seed's cluster: the seed's scheme, credentials and client options
    (`?ssl_ca_certs=...`: a TLS cluster's private CA), db 0."""
    parts = urlsplit(seed_url)
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    shown = f"[{host}]" if ":" in host else host
    netloc = f"{userinfo}@{shown}:{port}" if userinfo else f"{shown}:{port}"
    query = "&".join(p for p in parts.query.split("&") if p and p.partition("=")[0] != "db")
    return urlunsplit((parts.scheme, netloc, "", query, ""))


def display(endpoint: RedisEndpoint) -> str:
    """How the summary and the report show an endpoint: addresses and users, never a password."""
    if isinstance(endpoint, SentinelEndpoint):
        hosts = ",".join(urlsplit(u).netloc.rpartition("@")[2] for u in endpoint.sentinel_urls())
        return f"sentinel {hosts} service {endpoint.service}"
    shown = redact_url(endpoint.url.get_secret_value())
    return shown if endpoint.topology == "standalone" else f"{shown} (cluster)"


def parse_endpoint(value: SecretStr | str | dict[str, Any] | None, where: str) -> RedisEndpoint | None:
    """An inventory endpoint (as `Pair.master`/`Pair.replica` hold it) as a model; None stays None.

    `where` names the field in errors, e.g. ``pairs[0] (sessions).master``.
    """
    if value is None:
        return None
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if isinstance(value, str):
        value = {"url": value}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a URL or a mapping")
    sentinel = "sentinels" in value or "service" in value or value.get("topology") == "sentinel"
    model: type[NodeEndpoint] | type[SentinelEndpoint] = SentinelEndpoint if sentinel else NodeEndpoint
    try:
        return model.model_validate(value)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"] if _IDENT.match(str(p)))
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{where}{'.' + loc if loc else ''}: {msg}") from None


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


__all__ = [
    "TLS_FILES",
    "NodeEndpoint",
    "RedisEndpoint",
    "SentinelEndpoint",
    "TopologyKind",
    "display",
    "node_url",
    "parse_endpoint",
    "sentinel_url",
    "unreadable_tls_file",
]
