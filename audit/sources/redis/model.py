"""The redis kind's inventory models: the pair, and the keyspace settings Pika's pairs take too.

A redis pair's endpoint is a URL (a standalone server, as always), or a mapping for a fleet
(audit/sources/redis/endpoints.py): ``{url: ..., topology: cluster}`` for any node of a Redis Cluster,
``{sentinels: [...], service: ...}`` for a Sentinel-managed group. Without a `replica`, a fleet's own
replicas are audited against their masters (a replication audit, shard by shard); with one, the two
sides are compared as independent systems (a migration: `check_replication: false`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Discriminator, Field, SecretStr, Tag, model_validator

from audit import defaults
from audit.diff.compare_modes import CompareMode
from audit.kernel.pair import PairBase, Strict
from audit.sources.redis.endpoints import NodeEndpoint, SentinelEndpoint, address_problem
from audit.sources.redis.keyfilter import KeysSpec

if TYPE_CHECKING:
    from audit.sources.redis.snapshot import SnapshotOptions

RESP_SCHEMES = ("redis://", "rediss://", "unix://", "conn:")


def _sorted_dbs(dbs: list[int] | None) -> list[int] | None:
    if dbs is not None and any(not 0 <= d < 1 << 16 for d in dbs):
        raise ValueError("db indexes must be between 0 and 65535")
    return sorted(set(dbs)) if dbs is not None else None


def _resp_url(value: SecretStr | None) -> SecretStr | None:
    if value is None:
        return value
    url = value.get_secret_value()
    if not url.startswith(RESP_SCHEMES):
        raise ValueError("expected redis://host:port, rediss:// (TLS), unix:// or conn:<airflow_conn_id>")
    problem = address_problem(url)
    if problem:
        raise ValueError(problem)
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
    batch, and back-off when a batch stalls the server or its other clients' load rises past a bound."""

    max_keys_per_s: float | None = Field(None, gt=0, description="hard cap per server (default: none)")
    batch_time_s: float = Field(0.05, gt=0, description="target time per batch (pt-table-checksum's --chunk-time)")
    max_latency_ms: float | None = Field(
        10.0,
        gt=0,
        description="the longest another client may wait behind one batch: smaller batches, then a lower rate"
        " (None: never)",
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


class RedisSettings(KeyspaceSettings):
    """Kind redis' settings: the keyspace's, and how fleets are read."""

    fleet_snapshot: Literal["spark", "threads"] = Field(
        "spark", description="a fleet's nodes snapshotted as Spark tasks, or in driver threads"
    )
    fleet_threads: int = Field(2, gt=0, description="driver threads when fleet_snapshot is threads")
    field_diff_keys: int = Field(
        100, ge=0, description="keys still differing after the recheck whose fields are compared (the first N)"
    )


def _endpoint_tag(value: Any) -> str:
    if isinstance(value, str | SecretStr):
        return "url-string"
    if isinstance(value, dict) and ("sentinels" in value or "service" in value or value.get("topology") == "sentinel"):
        return "sentinel-endpoint"
    return "node-endpoint"


def _standalone_as_url(value: Any) -> Any:
    """`{url: ..., topology: standalone}` is a plain URL: the standalone checks take a URL."""
    if (
        isinstance(value, dict)
        and set(value) <= {"url", "topology"}
        and value.get("topology", "standalone") == "standalone"
    ):
        return value.get("url")
    return value


Endpoint = Annotated[
    Annotated[RespUrl, Tag("url-string")]
    | Annotated[NodeEndpoint, Tag("node-endpoint")]
    | Annotated[SentinelEndpoint, Tag("sentinel-endpoint")],
    Discriminator(_endpoint_tag),
    BeforeValidator(_standalone_as_url),
]
"""A URL (standalone), `{url, topology: cluster}`, or `{sentinels, service, ...}`; the tags' hyphens keep
them out of the inventory's error paths (``pairs[0] (x).master.url``)."""


def topology_of(value: Any) -> str:
    """standalone | cluster | sentinel, of an endpoint as the pair holds it."""
    if isinstance(value, SentinelEndpoint):
        return "sentinel"
    if isinstance(value, NodeEndpoint):
        return value.topology
    return "standalone"


class RedisPair(PairBase):
    kind: Literal["redis"]
    master: Endpoint
    replica: Endpoint | None = Field(None, description="optional for a cluster or sentinel master")
    dbs: DbList = None
    settings: RedisSettings = Field(default_factory=RedisSettings)
    keys: KeysSpec | None = Field(None, description="include/exclude globs: only matching keys are audited")
    compare: CompareMode = Field("full", description="full (value digests) | length | keys (presence only)")
    show_values: bool = Field(True, description="short string values (up to 64 bytes) shown in findings")

    @property
    def fleet(self) -> bool:
        """A cluster or sentinel on either side: the fleet checks audit it."""
        return any(topology_of(v) != "standalone" for v in (self.master, self.replica) if v is not None)

    @model_validator(mode="after")
    def _shape(self) -> RedisPair:
        m, r = topology_of(self.master), topology_of(self.replica) if self.replica is not None else None
        if r is None and m == "standalone":
            raise ValueError(
                "replica: give the replica's URL (only a cluster or sentinel master's replicas are discovered)"
            )
        if r is not None and self.fleet and self.check_replication:
            raise ValueError(
                f"check_replication: a {m} master with a {r} replica are two independent systems: set "
                "check_replication: false to compare them, or leave the replica out to audit the fleet's own replicas"
            )
        if "cluster" in (m, r) and self.dbs not in (None, [0]):
            if "cluster" == m == r or r is None:
                raise ValueError("dbs: a cluster has db 0 only")
            # keys are compared by (db, key): db 3's keys would all read as missing on the cluster and extra there
            other = "sentinel" if "sentinel" in (m, r) else "standalone"
            raise ValueError(
                f"dbs: a cluster has db 0 only, so a migration between it and a {other} side compares db 0"
                " (leave dbs out); another db of that side cannot be compared with the cluster"
            )
        return self
