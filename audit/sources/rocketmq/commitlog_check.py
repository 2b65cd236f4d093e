"""The rocketmq kind's commit-log check: both stores listed, then diffed in Spark (audit/sources/rocketmq/diff.py).

The snapshot lists the slave's files first, so a master still appending never looks behind.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from audit.errors import SnapshotError
from audit.kernel.check import Check
from audit.kernel.context import StageContext
from audit.layout import write_json
from audit.sources.rocketmq.model import RocketMQPair, StoreEndpoint

SIDES = ("master", "replica")
STORE_META = "store.json"


def commitlog_dir(store_dir: str) -> str:
    """`store_dir` may be the store root (holding commitlog/) or the commitlog directory itself."""
    parts = []
    for one in store_dir.split(";"):
        p = Path(one)
        parts.append(str(p / "commitlog") if (p / "commitlog").is_dir() else str(p))
    return ";".join(parts)


class CommitLogCheck(Check):
    name = "commitlog"
    coverage = (
        "master_files",
        "replica_files",
        "master_bytes",
        "replica_bytes",
        "master_records",
        "replica_records",
        "common_bytes",
        "bytes_compared",
        "bytes_not_compared",
        "chunks_equal",
        "chunks_different",
        "master_records_compared",
        "replica_records_compared",
        "master_damaged_records",
        "replica_damaged_records",
    )

    def __init__(self, pair: RocketMQPair) -> None:
        self.pair = pair

    def snapshot(self, ctx: StageContext) -> None:
        from audit.sources.rocketmq.store import commitlog_files, file_data_end

        files_count = {}
        for side in ("replica", "master"):
            endpoint: StoreEndpoint = getattr(self.pair, side)
            directory = commitlog_dir(endpoint.store_dir)
            if not all(Path(d).is_dir() for d in directory.split(";")):
                raise SnapshotError(
                    f"pair {self.pair.name}: {side} store {directory}: no such directory", where=directory
                )
            files = commitlog_files(directory)
            if not files:
                raise SnapshotError(
                    f"pair {self.pair.name}: {side} store {directory}: no commit-log files", where=directory
                )
            last_end = file_data_end(files[-1].path, file_start=files[-1].start, last_file=True)
            meta = {
                "store_dir": directory,
                "files": [[f.start, str(f.path), Path(f.path).stat().st_size] for f in files],
                "min_offset": files[0].start,
                "max_offset": last_end,
                "at_ms": int(time.time() * 1000),
            }
            write_json(ctx.snapshot_dir(side) / STORE_META, meta)
            ctx.state.servers[side] = {"endpoint": directory, "version": None}
            files_count[side] = len(files)
        ctx.state.servers = {side: ctx.state.servers[side] for side in SIDES}
        ctx.done(f"{files_count['master']}+{files_count['replica']} files")

    def diff(self, ctx: StageContext) -> None:
        from audit.sources.rocketmq.diff import diff_stores
        from audit.sources.rocketmq.store import CommitLogFile

        started = time.time()
        files = {}
        for side in SIDES:
            meta = json.loads((ctx.snapshot_dir(side) / STORE_META).read_text())
            files[side] = [CommitLogFile(start, Path(path)) for start, path, _ in meta["files"]]
        result = diff_stores(ctx.spark(), files["master"], files["replica"])
        try:
            ctx.add_findings_frame(result.findings)
        finally:
            result.release()
        ctx.metrics.update({k: v for k, v in result.metrics.items() if isinstance(v, int | float)})
        ctx.data.update({k: v for k, v in result.metrics.items() if not isinstance(v, int | float)})
        ctx.metrics["diff_s"] = round(time.time() - started, 3)
