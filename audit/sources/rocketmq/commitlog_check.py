"""The rocketmq kind's commit-log check: both stores listed, then diffed in Spark (audit/sources/rocketmq/diff.py).

The snapshot lists the slave's files first, so a master still appending never looks behind.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from audit.errors import SnapshotError, SourceError
from audit.kernel.check import Check, Uncovered
from audit.kernel.context import StageContext
from audit.kernel.identity import refuse_one_server
from audit.kernel.state import MetricValue
from audit.layout import write_json
from audit.sources.rocketmq.model import RocketMQPair, StoreEndpoint

SIDES = ("master", "replica")
STORE_META = "store.json"


def _cannot_read(pair: str, side: str, store_dir: str, e: OSError) -> SnapshotError:
    """A short error naming the pair, the side and the path the system refused (no traceback)."""
    path = e.filename or store_dir
    return SnapshotError(f"pair {pair}: {side} store {store_dir}: cannot read {path}: {e.strerror or e}", where=path)


def _readable_size(path: Path) -> int | None:
    """The file's size, once it is known to open for reading (a task would fail on it later); None when it
    is gone since it was listed (a broker's retention deletes the oldest files at any moment)."""
    try:
        with path.open("rb") as fh:
            return os.fstat(fh.fileno()).st_size
    except FileNotFoundError:
        return None


def _store_identities(stores: dict[str, StoreEndpoint]) -> dict[str, str | None]:
    """One store directory given twice (by another path, a symlink or a bind mount) gives one identity."""
    paths = {side: Path(store.store_dir) for side, store in stores.items()}
    if not all(p.is_dir() for p in paths.values()):
        return dict.fromkeys(paths)  # read_side names what is missing
    first = next(iter(paths.values()))
    return {side: str(first.resolve() if p.samefile(first) else p.resolve()) for side, p in paths.items()}


def read_side(pair: str, side: str, store_dir: str) -> dict[str, Any]:
    """One side's listing for store.json: its files with their sizes, the unlisted entries, min and max.

    Raises SnapshotError when the store cannot be read (a path refused, a loop, no directory), holds no
    commit-log file, or holds files that are all empty (nothing to audit).
    """
    from audit.sources.rocketmq.store import commitlog_folders, file_data_end, last_data_index, list_store

    try:
        directory = ";".join(str(f) for f in commitlog_folders(store_dir))
        listing = list_store(store_dir)
        found = [(f, size) for f in listing.files if (size := _readable_size(f.path)) is not None]
        files, sizes = [f for f, _ in found], [size for _, size in found]
        last = files[last_data_index([f.path for f in files])] if files else None
        last_end = None if last is None else file_data_end(last.path, file_start=last.start, last_file=True)
    except OSError as e:
        raise _cannot_read(pair, side, store_dir, e) from None
    where = f"pair {pair}: {side} store {directory}"
    unlisted = [[u.name, u.problem] for u in listing.unlisted]
    if last is None:
        bad = "; ".join(f"{name}: {problem}" for name, problem in unlisted)
        raise SnapshotError(f"{where}: no {'readable ' if bad else ''}commit-log files{f' ({bad})' if bad else ''}")
    if not any(sizes):
        raise SnapshotError(f"{where}: no commit-log data: all {len(sizes)} files are empty", where=directory)
    return {
        "store_dir": directory,
        "files": [[f.start, str(f.path), size] for f, size in found],
        "unlisted": unlisted,
        "min_offset": files[0].start,
        "max_offset": last_end,
        "at_ms": int(time.time() * 1000),
    }


def check_readable(pair: str, side: str, paths: Sequence[str]) -> None:
    """Every file still opens (Spark tasks read them next; a refused path would fail there, verbosely).

    A file gone since the snapshot listed it was deleted (a broker's retention): the diff leaves it out.
    """
    for path in paths:
        try:
            Path(path).open("rb").close()
        except FileNotFoundError:
            continue
        except OSError as e:
            raise SourceError(f"pair {pair}: {side} file {path}: cannot read: {e.strerror or e}", where=path) from None


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

    def uncovered(self, metrics: Mapping[str, MetricValue]) -> list[Uncovered]:
        """Two stores with no offset in common compared nothing: never a silent pass. The usual cause is a
        slave that stopped and a master whose retention has since deleted the files it would need next."""
        if metrics.get("common_bytes") != 0:
            return []
        m_min, r_max = metrics.get("master_min_offset"), metrics.get("replica_max_offset")
        if isinstance(m_min, int) and isinstance(r_max, int) and r_max < m_min:
            why = f"the slave's log ends at offset {r_max}, before the master's first file at {m_min}"
            return [Uncovered(1, f"no commit-log byte in common: {why} (deleted by retention; HA cannot resume)")]
        return [Uncovered(1, "no commit-log byte in common: the slave holds no data in the master's range")]

    def snapshot(self, ctx: StageContext) -> None:
        files_count = {}
        stores: dict[str, StoreEndpoint] = {side: self.pair.store(side, ctx.resolver) for side in SIDES}
        refuse_one_server(self.pair.name, _store_identities(stores), "store directory")
        for side in ("replica", "master"):
            endpoint = stores[side]
            meta = read_side(self.pair.name, side, endpoint.store_dir)
            write_json(ctx.snapshot_dir(side) / STORE_META, meta)
            ctx.state.servers[side] = {"endpoint": meta["store_dir"], "version": None}
            files_count[side] = len(meta["files"])
        ctx.state.servers = {side: ctx.state.servers[side] for side in SIDES}
        ctx.done(f"{files_count['master']}+{files_count['replica']} files")

    def diff(self, ctx: StageContext) -> None:
        from audit.sources.rocketmq.diff import diff_stores
        from audit.sources.rocketmq.store import CommitLogFile

        started = time.time()
        files, unlisted = {}, {}
        for side in SIDES:
            meta = json.loads((ctx.snapshot_dir(side) / STORE_META).read_text())
            check_readable(self.pair.name, side, [path for _, path, _ in meta["files"]])
            files[side] = [CommitLogFile(start, Path(path)) for start, path, _ in meta["files"]]
            unlisted[side] = [(name, problem) for name, problem in meta.get("unlisted", [])]
        result = diff_stores(ctx.spark(), files["master"], files["replica"], unlisted=unlisted)
        try:
            ctx.add_findings_frame(result.findings)
        finally:
            result.release()
        ctx.metrics.update({k: v for k, v in result.metrics.items() if isinstance(v, int | float)})
        ctx.data.update({k: v for k, v in result.metrics.items() if not isinstance(v, int | float)})
        ctx.metrics["diff_s"] = round(time.time() - started, 3)
