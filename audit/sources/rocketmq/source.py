"""Kind `rocketmq`: a master's and a slave's commit-log stores, and the HA state (reference/rocketmq.md).

The endpoints are store directories, not servers:

    master: {store_dir: /data/rmq-a/store, broker_log: /data/rmq-a/logs/broker.log, ha_status: /tmp/ha.txt}
    replica: {store_dir: /data/rmq-a-s/store}

`store_dir` holds `commitlog/` (or is it); `broker_log` (one path or a list: broker.log, store.log) gives
the master's `Slave fall behind master` lines and HA requests; `ha_status` a saved `mqadmin haStatus`
output. What is not given is skipped, and the summary says so. The snapshot stage lists the files and
their offsets (the slave's first, so a growing master never looks behind); the diff reads the files in
Spark; the HA checks run in the recheck stage.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, ClassVar

from audit.errors import ConfigError, SnapshotError
from audit.inventory import ConnResolver, Pair
from audit.layout import RunDir, write_json
from audit.sources.base import Progress
from audit.sources.sink import FindingsSink

SIDES = ("master", "replica")
STORE_META = "store.json"
COMMITLOG_FINDINGS = "commitlog_findings.parquet"
ENDPOINT_KEYS = {"store_dir", "broker_log", "ha_status", "broker_status", "ha_addr"}


def _endpoint(pair: Pair, side: str) -> dict[str, Any]:
    value = pair.master if side == "master" else pair.replica
    if not isinstance(value, dict):
        raise ConfigError(
            f"pair {pair.name}: {side}: expected a mapping like {{store_dir: /data/store}} for kind rocketmq"
        )
    unknown = set(value) - ENDPOINT_KEYS
    if unknown:
        raise ConfigError(
            f"pair {pair.name}: {side}.{sorted(unknown)[0]}: unknown key (known: {', '.join(sorted(ENDPOINT_KEYS))})"
        )
    if not value.get("store_dir"):
        raise ConfigError(f"pair {pair.name}: {side}.store_dir: required for kind rocketmq")
    return value


def _commitlog_dir(store_dir: str) -> str:
    """`store_dir` may be the store root (holding commitlog/) or the commitlog directory itself."""
    parts = []
    for one in store_dir.split(";"):
        p = Path(one)
        parts.append(str(p / "commitlog") if (p / "commitlog").is_dir() else str(p))
    return ";".join(parts)


def _text(path: str | None, what: str, pair: str) -> str | None:
    if not path:
        return None
    try:
        return Path(path).read_text(errors="replace")
    except OSError as e:
        raise SnapshotError(f"pair {pair}: {what} {path}: cannot read: {e.strerror}", where=path) from None


class RocketMQSource:
    KIND: ClassVar[str] = "rocketmq"
    SUITE: ClassVar[str] = "rocketmq.json"
    ENDPOINT_HELP: ClassVar[str] = (
        "{store_dir: PATH, broker_log: PATH (master), ha_status: PATH (saved mqadmin haStatus)}"
    )

    def snapshot(self, pair: Pair, run: RunDir, resolver: ConnResolver | None, progress: Progress | None) -> None:
        from audit.sources.rocketmq.store import commitlog_files, file_data_end

        state = run.load_state(pair.name)
        meta: dict[str, Any] = {}
        endpoints = {side: _endpoint(pair, side) for side in SIDES}  # config errors before any I/O
        for side in ("replica", "master"):
            ep = endpoints[side]
            directory = _commitlog_dir(str(ep["store_dir"]))
            if not all(Path(d).is_dir() for d in directory.split(";")):
                raise SnapshotError(f"pair {pair.name}: {side} store {directory}: no such directory", where=directory)
            files = commitlog_files(directory)
            if not files:
                raise SnapshotError(f"pair {pair.name}: {side} store {directory}: no commit-log files", where=directory)
            last_end = file_data_end(files[-1].path, file_start=files[-1].start, last_file=True)
            meta[side] = {
                "store_dir": directory,
                "files": [[f.start, f.path, Path(f.path).stat().st_size] for f in files],
                "min_offset": files[0].start,
                "max_offset": last_end,
                "at_ms": int(time.time() * 1000),
            }
            write_json(run.snapshot(pair.name, side) / STORE_META, meta[side])
        state["servers"] = {side: {"endpoint": meta[side]["store_dir"], "version": None} for side in SIDES}
        state["checks"]["commitlog"] = {
            "status": "done",
            "reason": f"{len(meta['master']['files'])}+{len(meta['replica']['files'])} files",
        }
        state["stages"]["snapshot"] = {"at_ms": int(time.time() * 1000)}
        run.save_state(pair.name, state)

    def diff(self, pair: Pair, run: RunDir) -> None:
        from audit.diff.spark import get_spark
        from audit.sources.rocketmq.diff import diff_stores
        from audit.sources.rocketmq.store import CommitLogFile

        state = run.require_stage(pair.name, "snapshot")
        started = time.time()
        files = {}
        for side in SIDES:
            meta = json.loads((run.snapshot(pair.name, side) / STORE_META).read_text())
            files[side] = [CommitLogFile(start, Path(path)) for start, path, _ in meta["files"]]
        result = diff_stores(get_spark(), files["master"], files["replica"], run_id=run.run_id, pair=pair.name)
        try:
            result.findings.write.mode("overwrite").parquet(str(run.work(pair.name) / COMMITLOG_FINDINGS))
        finally:
            result.release()
        state["metrics"].update({k: v for k, v in result.metrics.items() if isinstance(v, int | float)})
        state["commitlog"] = {k: v for k, v in result.metrics.items() if not isinstance(v, int | float)}
        state["metrics"]["diff_s"] = round(time.time() - started, 3)
        state["stages"]["diff"] = {"at_ms": int(time.time() * 1000)}
        run.save_state(pair.name, state)

    def recheck(self, pair: Pair, run: RunDir, resolver: ConnResolver | None) -> None:
        """No live re-read for files: the HA checks, diagnosis, and the findings file."""
        from audit.sources.rocketmq.ha import ha_findings, parse_broker_log, parse_ha_status

        state = run.require_stage(pair.name, "diff")
        m_ep, r_ep = _endpoint(pair, "master"), _endpoint(pair, "replica")
        log = None
        logs = m_ep.get("broker_log")
        if logs:
            lines: list[str] = []
            for path in [logs] if isinstance(logs, str) else list(logs):
                text = _text(str(path), "broker_log", pair.name)
                lines += (text or "").splitlines()
            log = parse_broker_log(lines)
        status_text = _text(m_ep.get("ha_status"), "ha_status", pair.name)
        status = parse_ha_status(status_text) if status_text else []
        mt = state["metrics"]
        ha = ha_findings(
            master_max=mt.get("master_max_offset"),
            replica_max=mt.get("replica_max_offset"),
            master_min=mt.get("master_min_offset"),
            log=log,
            ha_status=status,
            replica_addr=r_ep.get("ha_addr"),
        )
        given = [w for w, v in (("broker_log", log), ("ha_status", status_text)) if v]
        reason = (
            f"max offsets from the files; ack offset from {', '.join(given)}"
            if given
            else "max offsets from the files only (no broker_log or ha_status given: the ack offset was not checked)"
        )
        state["checks"]["ha"] = {"status": "done", "reason": reason}
        if not pair.check_replication:
            ha = []
            state["checks"]["ha"] = {"status": "skipped", "reason": "check_replication: false"}
        with FindingsSink(run, pair.name, pair.kind) as sink:
            sink.copy(run.work(pair.name) / COMMITLOG_FINDINGS)
            sink.add(ha)
        state["counts"] = sink.counts
        state["stages"]["recheck"] = {"at_ms": int(time.time() * 1000)}
        run.save_state(pair.name, state)


__all__ = ["RocketMQSource"]
