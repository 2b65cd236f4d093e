"""Kind `redis`: the keyspace (snapshot, Spark diff, live recheck) and the replication state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from audit.kernel.kind import ConnKind, KindSpec
from audit.sources.redis.model import RedisPair

if TYPE_CHECKING:
    from audit.kernel.check import Check
    from audit.sources.redis.keyspace_check import KeyspaceExtras


HOT_KEYS = 100
"""Keys still moving after the recheck's rounds that are judged at the replica's offset, at most."""


def checks(pair: RedisPair) -> Sequence[Check]:
    """A standalone pair: replication state and keyspace, as always. A fleet (a cluster or sentinel on
    either side): the topology, each shard's replication (when the fleet's own replicas are audited),
    and the keyspace over every node."""
    from audit.sources.redis.keyspace_check import KeyspaceExtras

    extras = KeyspaceExtras(
        keys=pair.keys,
        compare=pair.compare,
        show_values=pair.show_values,
        field_diff_keys=pair.settings.field_diff_keys,
        repair_plan=True,
    )
    if pair.fleet:
        return _fleet_checks(pair, extras)
    from audit.sources.redis.ack import RedisOffsetAck
    from audit.sources.redis.keyspace_check import KeyspaceCheck
    from audit.sources.redis.replication_check import ReplicationCheck

    ack = RedisOffsetAck() if pair.check_replication else None
    keyspace = KeyspaceCheck(
        pair.settings,
        dbs=pair.dbs,
        dbs_from_info=True,
        ack=ack,
        judge_hot_keys=HOT_KEYS if ack else 0,
        extras=extras,
    )
    return [ReplicationCheck(pair), keyspace]


def _fleet_checks(pair: RedisPair, extras: KeyspaceExtras) -> list[Check]:
    from audit.sources.redis.fleet_check import ShardReplicationCheck, TopologyCheck
    from audit.sources.redis.fleet_keyspace_check import FleetKeyspaceCheck

    replication: list[Check] = [ShardReplicationCheck(pair)] if pair.replica is None else []
    return [TopologyCheck(pair), *replication, FleetKeyspaceCheck(pair, extras)]


KIND = KindSpec(
    name="redis",
    pair_model=RedisPair,
    checks=checks,
    suite="redis.json",
    endpoint_help="redis://[user:password@]host:port  (rediss:// for TLS), or conn:<airflow_conn_id>",
    verifiable=True,
    connection_types={
        "replica_audit_redis": ConnKind("server", "redis", 6379, with_schema=False),
        "redis": ConnKind("server", "redis", 6379, with_schema=False),  # the official provider's type
    },
)
