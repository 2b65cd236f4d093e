"""Scan a generated master/slave binlog pair and diff it the way the Pika source does (Spark scan per side,
the binlog diff with each intermediate result staged as the check stages it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def scan_sides(spark: Any, root: Path, sides: tuple[str, str] = ("m", "s")) -> tuple[Any, Any]:
    """`root/<side>/log_db<N>/...` -> each side's scan DataFrame (written to `root/<side>.parquet`)."""
    from audit.sources.pika.logfiles import discover, scan_logs

    out = []
    for side in sides:
        path = root / f"{side}.parquet"
        scan_logs(spark, discover(root / side, None, side), str(path))
        out.append(spark.read.parquet(str(path)))
    return out[0], out[1]


def diff_binlogs(spark: Any, m: Any, s: Any, work: Path, dbs: int) -> Any:
    """The binlog diff's BinlogDiff, staged as the Pika binlog check stages it (under `work` on a cluster)."""
    from audit.diff.materialize import stager
    from audit.sources.pika.binlog_check import file_bases, file_ends
    from audit.sources.pika.binlog_diff import binlog_findings

    return binlog_findings(m, s, dbs, file_bases(file_ends(m, s)), stager(spark, work))
