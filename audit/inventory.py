"""The inventory: which master/replica pairs to audit, and how strictly.

Loaded from YAML, validated with pydantic. Every error names the pair and the field, e.g.
``pairs[1] (cache-main).gate.max_missing: Input should be a valid integer``. Unknown keys are rejected
so a typo never silently falls back to a default. Server URLs are kept as ``SecretStr`` and only ever
shown through :func:`redact_url`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from audit import defaults
from audit.errors import ConfigError

Kind = Literal["redis", "pika", "rocketmq", "mysql"]
ConnResolver = Callable[[str], str]
"""Maps an Airflow connection id to a URL; the plugin passes one backed by Airflow's connections."""

CATEGORY_ALIASES = {
    "max_missing": "missing_on_replica",
    "max_extra": "extra_on_replica",
}
"""Short gate names kept from DESIGN.md; every other threshold is ``max_<category>``."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Gate(_Strict):
    """Thresholds: a pair passes when every count is at most its threshold (None: not gated)."""

    max_missing: int | None = Field(0, ge=0)
    max_extra: int | None = Field(0, ge=0)
    max_type_mismatch: int | None = Field(0, ge=0)
    max_value_mismatch: int | None = Field(0, ge=0)
    max_ttl_mismatch: int | None = Field(0, ge=0)
    max_link_down: int | None = Field(0, ge=0)
    max_replica_ahead: int | None = Field(0, ge=0)
    max_wrong_master: int | None = Field(0, ge=0)
    max_missing_range: int | None = Field(0, ge=0)
    max_duplicate_range: int | None = Field(0, ge=0)
    max_divergent_entry: int | None = Field(0, ge=0)
    max_corrupt_record: int | None = Field(0, ge=0)
    max_torn_tail: int | None = Field(None, ge=0, description="a log cut mid-record is normal while it is written")
    max_negative_lag: int | None = Field(0, ge=0)
    max_stale_replica_data: int | None = Field(0, ge=0)
    max_lagging: int | None = Field(None, ge=0)
    max_lag_metric_unreliable: int | None = Field(None, ge=0)
    max_lag_bytes: int | None = Field(defaults.MAX_LAG_BYTES, ge=0)
    max_lag_seconds: float | None = Field(defaults.MAX_LAG_SECONDS, ge=0)
    max_uncovered: int = Field(0, ge=0, description="keys/records that could not be read; 0 means full coverage")

    def category_limits(self) -> dict[str, int | None]:
        """Threshold per finding category."""
        limits: dict[str, int | None] = {}
        for name, value in self.model_dump().items():
            if name in ("max_lag_bytes", "max_lag_seconds", "max_uncovered"):
                continue
            limits[CATEGORY_ALIASES.get(name, name.removeprefix("max_"))] = value
        return limits


class Settings(_Strict):
    """Per-pair tuning; the inventory's `defaults:` block supplies the values a pair does not set."""

    qps: int = Field(defaults.QPS, gt=0)
    recheck_rounds: int = Field(defaults.RECHECK_ROUNDS, ge=0)
    recheck_interval_s: float = Field(defaults.RECHECK_INTERVAL_S, ge=0)
    recheck_max_keys: int = Field(defaults.RECHECK_MAX_KEYS, ge=0)
    ttl_tolerance_ms: int = Field(defaults.TTL_TOLERANCE_MS, ge=0)
    scan_count: int = Field(defaults.SCAN_COUNT, gt=0)
    big_key_elements: int = Field(defaults.BIG_KEY_ELEMENTS, gt=0)


class BinlogDirs(_Strict):
    """Pika binlog locations: each holds `log_db<N>/write2file<M>` and `manifest` (Pika's `log-path`)."""

    master_dir: Path | None = None
    replica_dir: Path | None = None
    file_size: int = Field(
        defaults.PIKA_BINLOG_FILE_SIZE, gt=0, description="Pika's binlog-file-size (must be equal on both sides)"
    )

    @model_validator(mode="after")
    def _both_or_none(self) -> BinlogDirs:
        if (self.master_dir is None) != (self.replica_dir is None):
            raise ValueError("give both master_dir and replica_dir (or neither)")
        return self


class Pair(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
    kind: Kind
    master: SecretStr | dict[str, Any] | None = None
    replica: SecretStr | dict[str, Any] | None = None
    dbs: list[int] | None = Field(None, description="logical databases; default: every db either side has keys in")
    check_replication: bool = Field(True, description="false for two independent servers (post-migration)")
    gate: Gate = Gate()
    settings: Settings = Settings()
    binlog: BinlogDirs | None = None
    tables: list[str] | None = None

    @field_validator("dbs")
    @classmethod
    def _dbs_in_range(cls, dbs: list[int] | None) -> list[int] | None:
        if dbs is not None and any(not 0 <= d < 1 << 16 for d in dbs):
            raise ValueError("db indexes must be between 0 and 65535")
        return sorted(set(dbs)) if dbs is not None else None


class Inventory(_Strict):
    pairs: list[Pair]
    digest: str = ""

    @model_validator(mode="after")
    def _unique_names(self) -> Inventory:
        names = [p.name for p in self.pairs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"pair names must be unique; repeated: {', '.join(dupes)}")
        return self

    def select(self, names: list[str] | None) -> list[Pair]:
        if not names:
            return list(self.pairs)
        known = {p.name: p for p in self.pairs}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ConfigError(f"--pair {', '.join(unknown)}: not in the inventory (known: {', '.join(known)})")
        return [known[n] for n in names]

    def pair(self, name: str) -> Pair:
        return self.select([name])[0]


_SETTINGS_KEYS = set(Settings.model_fields)


def _merge_defaults(raw: dict[str, Any]) -> dict[str, Any]:
    """Push the `defaults:` block into every pair; a pair's own keys win."""
    base = dict(raw.get("defaults") or {})
    base_gate = base.pop("gate", None) or {}
    unknown = set(base) - _SETTINGS_KEYS
    if unknown:
        known = ", ".join(sorted(_SETTINGS_KEYS))
        raise ConfigError(f"defaults.{sorted(unknown)[0]}: unknown setting (known: {known})")
    pairs = []
    for item in raw.get("pairs") or []:
        if not isinstance(item, dict):
            pairs.append(item)
            continue
        pair = dict(item)
        own_settings = {k: pair.pop(k) for k in list(pair) if k in _SETTINGS_KEYS}
        pair["settings"] = {**base, **(pair.get("settings") or {}), **own_settings}
        if isinstance(pair.get("gate"), dict) or "gate" not in pair:
            pair["gate"] = {**base_gate, **(pair.get("gate") or {})}
        pairs.append(pair)
    return {"pairs": pairs}


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _field_path(loc: tuple[int | str, ...], raw: dict[str, Any]) -> str:
    parts: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(part, int):
            label = f"[{part}]"
            if i > 0 and loc[i - 1] == "pairs":
                try:
                    label += f" ({raw['pairs'][part]['name']})"
                except (KeyError, IndexError, TypeError):
                    pass
            parts.append(label)
        elif not _IDENT.match(str(part)) or part in ("str", "int"):
            continue  # pydantic's union-branch labels say nothing to an operator
        else:
            parts.append(("." if parts else "") + str(part))
    return "".join(parts) or "inventory"


def parse_inventory(text: str, source: str = "inventory") -> Inventory:
    """Validate inventory YAML text; raise ConfigError naming the first bad field."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}") from None
    if not isinstance(raw, dict) or "pairs" not in raw:
        raise ConfigError(f"{source}: expected a mapping with a `pairs:` list")
    unknown_top = set(raw) - {"defaults", "pairs"}
    if unknown_top:
        raise ConfigError(f"{source}: {sorted(unknown_top)[0]}: unknown key (expected defaults, pairs)")
    if not isinstance(raw.get("defaults") or {}, dict):
        raise ConfigError(f"{source}: defaults: expected a mapping")
    if not isinstance(raw["pairs"], list) or not raw["pairs"]:
        raise ConfigError(f"{source}: pairs: expected a non-empty list")
    merged = _merge_defaults(raw)
    try:
        inv = Inventory.model_validate({**merged, "digest": hashlib.sha256(text.encode()).hexdigest()})
    except ValidationError as e:
        problems: dict[str, list[str]] = {}
        for err in e.errors():
            problems.setdefault(_field_path(tuple(err["loc"]), merged), []).append(err["msg"])
        shown = [f"{path}: {' or '.join(dict.fromkeys(msgs))}" for path, msgs in list(problems.items())[:5]]
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise ConfigError(f"{source}: " + "; ".join(shown) + more) from None
    return inv


def load_inventory(path: str | Path) -> Inventory:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"inventory {p}: cannot read: {e.strerror}") from None
    return parse_inventory(text, source=str(p))


_CONN_ENV = "AIRFLOW_CONN_{}"


def env_conn_resolver(conn_id: str) -> str:
    """Resolve `conn:<id>` outside Airflow from AIRFLOW_CONN_<ID>, the same variable Airflow reads."""
    value = os.environ.get(_CONN_ENV.format(conn_id.upper()))
    if not value:
        raise ConfigError(f"conn:{conn_id}: no Airflow connection (set {_CONN_ENV.format(conn_id.upper())})")
    if value.lstrip().startswith("{"):
        return _url_from_conn_json(conn_id, value)
    return value


def _url_from_conn_json(conn_id: str, value: str) -> str:
    try:
        c = json.loads(value)
    except json.JSONDecodeError:
        raise ConfigError(f"conn:{conn_id}: AIRFLOW_CONN_{conn_id.upper()} is not valid JSON") from None
    scheme = c.get("conn_type", "redis")
    auth = ""
    if c.get("login") or c.get("password"):
        auth = f"{c.get('login') or ''}:{c.get('password') or ''}@"
    db = f"/{c['schema']}" if c.get("schema") else ""
    return f"{scheme}://{auth}{c.get('host', 'localhost')}:{c.get('port', 6379)}{db}"


def endpoint_url(value: SecretStr | dict[str, Any] | None, resolver: ConnResolver | None = None) -> str | None:
    """The real URL of a server endpoint (secret included): only hand it to a client, never print it."""
    if value is None or isinstance(value, dict):
        return None
    raw = value.get_secret_value()
    if raw.startswith("conn:"):
        return (resolver or env_conn_resolver)(raw[len("conn:") :])
    return raw


_PASSWORD_RE = re.compile(r"(?<=[:/])[^:/@]*:[^@]*@")


def redact_url(url: str | None) -> str:
    """`redis://user:secret@h:1/0` -> `redis://user:***@h:1/0`; never returns a password."""
    if not url:
        return ""
    if url.startswith("conn:"):
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return _PASSWORD_RE.sub("***@", url)
    if parts.password is None and "@" not in parts.netloc:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a port that is not a number: show nothing rather than fail on a typo
        port = ""
    netloc = f"{user}:***@{host}{port}" if parts.password is not None else f"{user}@{host}{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def display_endpoint(value: SecretStr | dict[str, Any] | None) -> str:
    """What the summary and the report may show for an endpoint."""
    if value is None:
        return ""
    if isinstance(value, dict):
        return json.dumps({k: v for k, v in value.items() if "pass" not in k.lower()}, sort_keys=True)
    return redact_url(value.get_secret_value())
