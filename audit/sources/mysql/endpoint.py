"""Configuration of kind mysql: a server endpoint (`mysql://...`), the kind's settings, table patterns.

Every error is a ConfigError that names the field (`master`, `settings.chunk_time_s`, `tables[1]`) and
shows a URL only redacted.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from pydantic import BaseModel, Field, SecretStr, ValidationError

from audit.connections import extra_field
from audit.errors import ConfigError
from audit.kernel.pair import Strict as _Strict
from audit.urls import shown_server_url

DEFAULT_PORT = 3306
UNENCODED_HINT = "a password with an unencoded '/', '?' or '#' reads as one: percent-encode it"
URL_HELP = "mysql://user:password@host:3306 (options: ?connect_timeout=5&ssl_ca=/path/ca.pem)"
SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})


class MySQLEndpoint(_Strict):
    """One server. `password` is a SecretStr: it reaches the driver and nothing else."""

    host: str = Field(min_length=1)
    port: int = Field(DEFAULT_PORT, gt=0, lt=65536)
    user: str = Field(min_length=1)
    password: SecretStr = SecretStr("")
    connect_timeout_s: float = Field(5.0, gt=0)
    ssl_ca: str | None = None
    ssl_cert: str | None = None
    ssl_key: str | None = None
    shown: str = ""
    """The URL with the password masked: what messages and reports show."""

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def from_url(cls, url: str, field: str = "endpoint", *, check_files: bool = True) -> MySQLEndpoint:
        shown = shown_server_url(url)
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:  # not the parser's words: they quote the port it read, maybe part of a password
            raise ConfigError(f"{field}: {shown}: bad host or port ({UNENCODED_HINT}); expected {URL_HELP}") from None
        if parts.scheme not in ("mysql", "mariadb"):
            raise ConfigError(f"{field}: {shown}: scheme must be mysql:// (or mariadb://); expected {URL_HELP}")
        if not parts.hostname:
            raise ConfigError(f"{field}: {shown}: no host; expected {URL_HELP}")
        if not parts.username:
            raise ConfigError(f"{field}: {shown}: no user; expected {URL_HELP}")
        options = dict(parse_qsl(parts.query))
        known = {"connect_timeout", "ssl_ca", "ssl_cert", "ssl_key"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(f"{field}: {shown}: unknown option {unknown[0]!r} (known: {', '.join(sorted(known))})")
        for option in ("ssl_ca", "ssl_cert", "ssl_key"):
            if check_files and option in options and not os.access(options[option], os.R_OK):
                raise ConfigError(f"{field}: {shown}: {option}={options[option]}: no such readable file")
        if "connect_timeout" in options:
            try:
                if float(options["connect_timeout"]) <= 0:
                    raise ValueError
            except ValueError:
                raise ConfigError(
                    f"{field}: {shown}: connect_timeout={options['connect_timeout']}: expected seconds above 0"
                ) from None
        raw: dict[str, Any] = {
            "host": parts.hostname,
            "port": port or DEFAULT_PORT,
            "user": unquote(parts.username),
            "password": SecretStr(unquote(parts.password or "")),
            "shown": shown,
            **{k: v for k, v in options.items() if k.startswith("ssl_")},
        }
        if "connect_timeout" in options:
            raw["connect_timeout_s"] = options["connect_timeout"]
        return _validated(cls, raw, f"{field} ({shown})")


HashFunction = Literal["crc32", "md5"]


class MySQLSettings(_Strict):
    """Tuning of a mysql pair (docs/mysql.md, "Settings")."""

    chunk_time_s: float = Field(0.02, gt=0, description="time target of one chunk's checksum query")
    min_chunk_rows: int = Field(500, gt=0)
    max_chunk_rows: int = Field(50_000, gt=0)
    fetch_rows: int = Field(2_000, gt=0, description="a differing range this small is compared row by row")
    recheck_rounds: int = Field(3, ge=0)
    recheck_interval_s: float = Field(0.5, ge=0)
    recheck_max_rows: int = Field(100_000, ge=0)
    max_fetch_bytes: int = Field(
        64 << 20,
        ge=1 << 20,
        description="bytes of rows one fetch may hold (each side, or a recheck's three reads, together)",
    )
    gtid_wait_s: float = Field(10.0, ge=0, description="bound of each wait for the replica to reach the master")
    hash_function: HashFunction = "crc32"
    parallelism: int | None = Field(None, gt=0, description="Spark tasks; default: Spark's default parallelism")
    min_segment_rows: int = Field(100_000, gt=0, description="a table is split over tasks only above this")
    max_rows_per_s: int | None = Field(None, gt=0, description="pace of each task's reads (rows/s per side)")
    read_timeout_s: float = Field(600.0, gt=0)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None, field: str = "settings") -> MySQLSettings:
        settings = _validated(cls, dict(raw or {}), field)
        if settings.min_chunk_rows > settings.max_chunk_rows:  # a chunk's size would be clamped past its bounds
            raise ConfigError(
                f"{field}.min_chunk_rows: {settings.min_chunk_rows} is above "
                f"{field}.max_chunk_rows ({settings.max_chunk_rows})"
            )
        return settings


M = TypeVar("M", bound=BaseModel)


def _validated(model: type[M], raw: dict[str, Any], field: str) -> M:
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"{field}.{where}: {err['msg']}" if where else f"{field}: {err['msg']}") from None


# --- table patterns -------------------------------------------------------------------------------------

_PART = r"(?:`(?:[^`]|``)+`|[^`.]+)"
_PATTERN = re.compile(rf"^({_PART})\.({_PART})$")


@dataclass(frozen=True)
class TablePattern:
    """`shop.orders`, `shop.*`, `*.audit_?`, or backquoted parts, taken literally: `` `a.b`.`t*` ``."""

    schema: str
    table: str
    text: str
    schema_glob: bool = False
    table_glob: bool = False

    @property
    def is_glob(self) -> bool:
        return self.schema_glob or self.table_glob

    def matches(self, schema: str, table: str) -> bool:
        return _part_matches(schema, self.schema, self.schema_glob) and _part_matches(
            table, self.table, self.table_glob
        )


def _part_matches(name: str, pattern: str, glob: bool) -> bool:
    return fnmatch.fnmatchcase(name, pattern) if glob else name == pattern


def _part(text: str) -> tuple[str, bool]:
    """(name or glob, is a glob); a backquoted part is a literal name."""
    if text.startswith("`") and text.endswith("`"):
        return text[1:-1].replace("``", "`"), False
    return text, any(ch in text for ch in "*?[")


def parse_tables(patterns: Sequence[str] | None, field: str = "tables") -> tuple[TablePattern, ...]:
    """Validate the `tables:` list; None or empty means every base table outside the system schemas."""
    out = []
    for i, text in enumerate(patterns or ()):
        if not isinstance(text, str):
            raise ConfigError(f"{field}[{i}]: expected a string like shop.orders or shop.*")
        m = _PATTERN.match(text.strip())
        if m is None:
            raise ConfigError(f"{field}[{i}]: {text!r} is not schema.table (use shop.orders, shop.* or `a.b`.`t`)")
        (schema, schema_glob), (table, table_glob) = _part(m.group(1)), _part(m.group(2))
        out.append(TablePattern(schema, table, text.strip(), schema_glob, table_glob))
    return tuple(out)


URL_OPTIONS = ("connect_timeout", "ssl_ca", "ssl_cert", "ssl_key")


def connection_url_options(conn_type: str, extra: Mapping[str, Any]) -> dict[str, str]:
    """The URL options an Airflow connection's extra sets: this provider's flat fields (`ssl_ca`, ...,
    also as the form stores them, `extra__<type>__ssl_ca`), and the official MySQL provider's
    `{"ssl": {"ca": ..., "cert": ..., "key": ...}}` (a mapping or its JSON text) and `connect_timeout`.
    Without this, a connection's TLS settings were dropped and the audit connected in plain text."""
    options: dict[str, str] = {}
    for name in URL_OPTIONS:
        value = extra_field(extra, conn_type, name)
        if value not in (None, ""):
            options[name] = str(value)
    ssl = extra.get("ssl")
    if isinstance(ssl, str) and ssl.strip().startswith("{"):
        import json

        try:
            ssl = json.loads(ssl)
        except ValueError:
            raise ConfigError(f"connection extra ssl: not JSON: {ssl[:80]!r}") from None
    if isinstance(ssl, Mapping):
        for key in ("ca", "cert", "key"):
            if ssl.get(key) not in (None, "") and f"ssl_{key}" not in options:
                options[f"ssl_{key}"] = str(ssl[key])
    return options
