"""Kind `pika`: binlog files and positions, per-DB replication state, and the keyspace over RESP."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from audit.kernel.kind import ConnKind, KindSpec
from audit.sources.pika.model import PikaPair

if TYPE_CHECKING:
    from audit.kernel.check import Check


def checks(pair: PikaPair) -> Sequence[Check]:
    from audit.sources.pika.ack import PikaBinlogAck
    from audit.sources.pika.binlog_check import BinlogCheck, annotate_with_binlogs
    from audit.sources.pika.replication_check import PikaReplicationCheck
    from audit.sources.redis.keyspace_check import KeyspaceCheck

    # The binlogs are scanned before the keyspace, as a Pika pair has always been audited: a slave's
    # binlog cut then precedes the keys it holds.
    return [
        PikaReplicationCheck(pair),
        BinlogCheck(pair),
        KeyspaceCheck(
            pair.settings,
            dbs=pair.dbs,
            dbs_from_info=False,
            ack=PikaBinlogAck(pair.dbs or [0]) if pair.check_replication else None,
            annotate=annotate_with_binlogs,
        ),
    ]


KIND = KindSpec(
    name="pika",
    pair_model=PikaPair,
    checks=checks,
    suite="pika.json",
    endpoint_help="redis://host:port of each Pika server (optional), and/or binlog: {master_dir, replica_dir} "
    "holding log_db<N>/ directories",
    verifiable=True,
    connection_types={
        "replica_audit_pika": ConnKind("server", "redis", 9221, with_schema=False),
        "pika": ConnKind("server", "redis", 9221, with_schema=False),
    },
)
