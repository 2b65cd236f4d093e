"""Kind `rocketmq`: a master's and a slave's commit-log stores, and the HA offsets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from audit.kernel.kind import ConnKind, KindSpec
from audit.sources.rocketmq.model import RocketMQPair

if TYPE_CHECKING:
    from audit.kernel.check import Check


def checks(pair: RocketMQPair) -> Sequence[Check]:
    from audit.sources.rocketmq.commitlog_check import CommitLogCheck
    from audit.sources.rocketmq.ha_check import HaCheck

    return [CommitLogCheck(pair), HaCheck(pair)]


KIND = KindSpec(
    name="rocketmq",
    pair_model=RocketMQPair,
    checks=checks,
    suite="rocketmq.json",
    endpoint_help="{store_dir: PATH, broker_log: PATH (master), ha_status: PATH (saved mqadmin haStatus)}"
    " or conn:<airflow_conn_id>",
    connection_types={
        "replica_audit_rocketmq": ConnKind("store", "", 0, with_schema=False),
        "fs": ConnKind("store", "", 0, with_schema=False),  # Airflow's own file connection
        "file": ConnKind("store", "", 0, with_schema=False),
    },
)
