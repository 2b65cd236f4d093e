"""Kind `redis`: the keyspace (snapshot, Spark diff, live recheck) and the replication state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from audit.kernel.kind import KindSpec
from audit.sources.redis.model import RedisPair

if TYPE_CHECKING:
    from audit.kernel.check import Check


def checks(pair: RedisPair) -> Sequence[Check]:
    from audit.sources.redis.keyspace_check import KeyspaceCheck
    from audit.sources.redis.replication_check import ReplicationCheck

    return [ReplicationCheck(pair), KeyspaceCheck(pair.settings, dbs=pair.dbs, dbs_from_info=True)]


KIND = KindSpec(
    name="redis",
    pair_model=RedisPair,
    checks=checks,
    suite="redis.json",
    endpoint_help="redis://[user:password@]host:port  (rediss:// for TLS), or conn:<airflow_conn_id>",
    verifiable=True,
)
