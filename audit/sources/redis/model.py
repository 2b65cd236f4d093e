"""The redis kind's inventory models: the pair, and the keyspace settings Pika's pairs take too."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, SecretStr

from audit import defaults
from audit.kernel.pair import PairBase, Strict

RESP_SCHEMES = ("redis://", "rediss://", "unix://", "conn:")


def _sorted_dbs(dbs: list[int] | None) -> list[int] | None:
    if dbs is not None and any(not 0 <= d < 1 << 16 for d in dbs):
        raise ValueError("db indexes must be between 0 and 65535")
    return sorted(set(dbs)) if dbs is not None else None


def _resp_url(value: SecretStr | None) -> SecretStr | None:
    if value is not None and not value.get_secret_value().startswith(RESP_SCHEMES):
        raise ValueError("expected redis://host:port, rediss:// (TLS), unix:// or conn:<airflow_conn_id>")
    return value


DbList = Annotated[
    list[int] | None,
    AfterValidator(_sorted_dbs),
    Field(description="logical databases; default: every db either side has keys in"),
]
RespUrl = Annotated[SecretStr, AfterValidator(_resp_url)]


class KeyspaceSettings(Strict):
    """Tuning of a keyspace audit over the Redis protocol; the inventory's `defaults:` block supplies
    the values a pair does not set."""

    qps: int = Field(defaults.QPS, gt=0)
    recheck_rounds: int = Field(defaults.RECHECK_ROUNDS, ge=0)
    recheck_interval_s: float = Field(defaults.RECHECK_INTERVAL_S, ge=0)
    recheck_max_keys: int = Field(defaults.RECHECK_MAX_KEYS, ge=0)
    ttl_tolerance_ms: int = Field(defaults.TTL_TOLERANCE_MS, ge=0)
    scan_count: int = Field(defaults.SCAN_COUNT, gt=0)
    big_key_elements: int = Field(defaults.BIG_KEY_ELEMENTS, gt=0)


class RedisPair(PairBase):
    kind: Literal["redis"]
    master: RespUrl
    replica: RespUrl
    dbs: DbList = None
    settings: KeyspaceSettings = Field(default_factory=KeyspaceSettings)
