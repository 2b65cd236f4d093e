"""The redis kind's inventory models: the pair, and the keyspace settings Pika's pairs take too."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, Field, SecretStr, model_validator

from audit import defaults
from audit.kernel.pair import PairBase, Strict

if TYPE_CHECKING:
    from audit.sources.redis.snapshot import SnapshotOptions

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
    the values a pair does not set. Pacing (audit/pacing.py): a hard cap per server, a target time per
    batch, and back-off when the server's latency or its other clients' load rise past a bound."""

    max_keys_per_s: float | None = Field(None, gt=0, description="hard cap per server (default: none)")
    batch_time_s: float = Field(0.05, gt=0, description="target time per batch (pt-table-checksum's --chunk-time)")
    max_latency_ms: float | None = Field(
        10.0, gt=0, description="back off when the server takes longer than this to answer (None: never)"
    )
    max_other_ops_per_s: float | None = Field(
        None, gt=0, description="back off when the server's other clients run more ops/s than this"
    )
    pace_sample_every_s: float = Field(1.0, gt=0, description="how often the server's load is sampled")
    snapshot_processes: bool = Field(True, description="a process per side (False: a thread each)")
    qps: int | None = Field(
        None, gt=0, description="deprecated: commands/s per server; read as max_keys_per_s = qps / 4"
    )
    recheck_rounds: int = Field(defaults.RECHECK_ROUNDS, ge=0)
    recheck_interval_s: float = Field(defaults.RECHECK_INTERVAL_S, ge=0)
    recheck_ack_wait_s: float = Field(
        defaults.RECHECK_ACK_WAIT_S,
        ge=0,
        description="how long a recheck waits for the replica to apply the master's read",
    )
    recheck_max_keys: int = Field(defaults.RECHECK_MAX_KEYS, ge=0)
    ttl_tolerance_ms: int = Field(defaults.TTL_TOLERANCE_MS, ge=0)
    scan_count: int = Field(defaults.SCAN_COUNT, gt=0)
    big_key_elements: int = Field(defaults.BIG_KEY_ELEMENTS, gt=0)

    @model_validator(mode="after")
    def _qps_is_deprecated(self) -> KeyspaceSettings:
        if self.qps is not None:
            from audit.pacing import qps_warning

            logging.getLogger("replica_audit").warning(qps_warning(self.qps))
        return self

    def snapshot_options(self) -> SnapshotOptions:
        from audit.sources.redis.snapshot import SnapshotOptions

        return SnapshotOptions(
            scan_count=self.scan_count,
            page=self.big_key_elements,
            max_keys_per_s=self.max_keys_per_s,
            qps=self.qps if self.max_keys_per_s is None else None,
            batch_time_s=self.batch_time_s,
            max_latency_ms=self.max_latency_ms,
            max_other_ops_per_s=self.max_other_ops_per_s,
            sample_every_s=self.pace_sample_every_s,
        )


class RedisPair(PairBase):
    kind: Literal["redis"]
    master: RespUrl
    replica: RespUrl
    dbs: DbList = None
    settings: KeyspaceSettings = Field(default_factory=KeyspaceSettings)
