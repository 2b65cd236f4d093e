"""Kind `pika`: binlog files and positions, per-DB replication state, and the keyspace through the Redis
machinery (Pika speaks RESP2; reference/pika_commands.md lists what it lacks, and the Redis reader only
uses commands Pika has: SCAN, TYPE, PTTL, the length commands and HSCAN/SSCAN/ZSCAN/LRANGE/GETRANGE/XRANGE).

Servers and binlog directories are each optional: without servers the pair is a files-only audit of the
binlogs (keyspace and INFO checks are skipped, and the summary says so); without `binlog:` only the
keyspace and INFO are audited.
"""

from __future__ import annotations

import json
import time
from typing import Any, ClassVar
from urllib.parse import urlsplit

import redis

from audit import defaults
from audit.errors import ConfigError
from audit.findings import Finding
from audit.inventory import ConnResolver, Pair, endpoint_url, redact_url
from audit.layout import RunDir, write_json
from audit.sources.base import Progress
from audit.sources.pika.info import BinlogOffset, PikaReplication, parse_pika_replication
from audit.sources.pika.replication import (
    PikaSample,
    lag_total,
    manifest_behind_info,
    pika_replication_findings,
    wrong_master,
)
from audit.sources.redis.client import connect, info_text
from audit.sources.redis.source import SIDES, RedisSource, diff_keyspace
from audit.sources.sink import FindingsSink, finding_from_row

BINLOG_SCAN = "binlog.parquet"
BINLOG_META = "binlog.json"
BINLOG_FINDINGS = "binlog_findings.parquet"


def _urls(pair: Pair, resolver: ConnResolver | None) -> tuple[str, str] | None:
    m, r = endpoint_url(pair.master, resolver), endpoint_url(pair.replica, resolver)
    if m is None and r is None:
        return None
    for side, url in (("master", m), ("replica", r)):
        if not url:
            raise ConfigError(
                f"pair {pair.name}: {side}: give both servers (redis://host:port) or neither (files-only binlog audit)"
            )
        if urlsplit(url).scheme not in ("redis", "rediss", "unix"):
            raise ConfigError(f"pair {pair.name}: {side}: expected redis://host:port, got {redact_url(url)}")
    assert m is not None and r is not None
    return m, r


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "localhost", parts.port or 9221


def _repl(client: redis.Redis) -> tuple[PikaReplication, str]:
    raw = info_text(client, "replication").decode("utf-8", "replace")
    return parse_pika_replication(raw), raw


class PikaSource(RedisSource):
    KIND: ClassVar[str] = "pika"
    SUITE: ClassVar[str] = "pika.json"
    ENDPOINT_HELP: ClassVar[str] = (
        "redis://host:port of each Pika server (optional), and/or "
        "binlog: {master_dir, replica_dir} holding log_db<N>/ directories"
    )

    # --- snapshot ----------------------------------------------------------------------------------
    def snapshot(self, pair: Pair, run: RunDir, resolver: ConnResolver | None, progress: Progress | None) -> None:
        urls = _urls(pair, resolver)
        if urls is None and pair.binlog is None:
            raise ConfigError(
                f"pair {pair.name}: kind pika needs servers (master, replica) or binlog: {{master_dir, replica_dir}}"
            )
        state = run.load_state(pair.name)
        dbs = pair.dbs or [0]
        state["dbs"] = dbs
        clients: dict[str, redis.Redis] = {}
        if urls is not None:
            clients = {
                "master": connect(urls[0], role=f"{pair.name} master"),
                "replica": connect(urls[1], role=f"{pair.name} replica"),
            }
            state["servers"] = {}
            for side, url in zip(SIDES, urls, strict=True):
                server = info_text(clients[side], "server").decode("utf-8", "replace")
                version = next(
                    (
                        ln.split(":", 1)[1].strip()
                        for ln in server.splitlines()
                        if ln.startswith(("pika_version:", "redis_version:"))
                    ),
                    None,
                )
                state["servers"][side] = {"endpoint": redact_url(url), "version": version}
            self._check_master(pair, run, clients, urls, state)
        else:
            why = "no servers in the inventory: files-only audit of the binlogs"
            state["checks"]["keyspace"] = {"status": "skipped", "reason": why}
            state["checks"]["replication"] = {"status": "skipped", "reason": why}
        if pair.binlog is not None:
            self._snapshot_binlogs(pair, run, clients, state)
        else:
            state["checks"]["binlog"] = {"status": "skipped", "reason": "no binlog: {master_dir, replica_dir} given"}
        if urls is not None and state["checks"].get("keyspace", {}).get("status") != "skipped":
            self._snapshot_sides(pair, run, clients, urls, dbs, {"master": 0, "replica": 0}, progress, state)
        state["stages"]["snapshot"] = {"at_ms": int(time.time() * 1000)}
        run.save_state(pair.name, state)

    def _check_master(
        self, pair: Pair, run: RunDir, clients: dict[str, redis.Redis], urls: tuple[str, str], state: dict[str, Any]
    ) -> None:
        state["early_findings"] = []
        if not pair.check_replication:
            state["checks"]["replication"] = {"status": "skipped", "reason": "check_replication: false"}
            return
        slave, _ = _repl(clients["replica"])
        wm = wrong_master(slave, *_host_port(urls[0]))
        if wm is not None:
            state["early_findings"].append(wm.to_row(run.run_id, pair.name, pair.kind))
            state["checks"]["keyspace"] = {
                "status": "skipped",
                "reason": f"the slave does not follow this pair's master ({json.dumps(wm.evidence, sort_keys=True)})",
            }

    def _snapshot_binlogs(
        self, pair: Pair, run: RunDir, clients: dict[str, redis.Redis], state: dict[str, Any]
    ) -> None:
        from audit.diff.spark import get_spark
        from audit.sources.pika.logfiles import discover, producer_positions, scan_logs

        assert pair.binlog is not None
        dirs = {"master": pair.binlog.master_dir, "replica": pair.binlog.replica_dir}
        spark = get_spark()
        meta: dict[str, Any] = {}
        # The slave first: its cut is then older than the master's, so a healthy slave never holds a
        # record the master's cut lacks, however fast both logs grow while they are read.
        for side in ("replica", "master"):
            directory = dirs[side]
            assert directory is not None
            # INFO right before the manifest: the two should name the same producer position
            info = _repl(clients[side])[0] if side in clients else None
            logs = discover(directory, pair.dbs, side)
            started = time.time()
            out = run.snapshot(pair.name, side)
            counts = scan_logs(spark, logs, str(out / BINLOG_SCAN))
            positions = producer_positions(logs)
            meta[side] = {
                "dir": str(directory),
                "scan_s": round(time.time() - started, 3),
                **counts,
                "dbs": [log.db for log in logs],
                "manifest": {str(d): list(p) if p else None for d, p in positions.items()},
                "info_binlog_offset": {str(d): [o.filenum, o.offset] for d, o in info.binlog.items()} if info else None,
                "files": {str(log.db): [[f.filenum, f.size, f.logical_end] for f in log.files] for log in logs},
            }
            write_json(out / BINLOG_META, meta[side])
            state["metrics"][f"{side}_binlog_files"] = counts["files"]
            state["metrics"][f"{side}_binlog_bytes"] = counts["bytes"]
            state["metrics"][f"{side}_binlog_scan_s"] = meta[side]["scan_s"]
        state["binlog"] = {
            "dbs": meta["master"]["dbs"],
            "crosscheck": _crosscheck(meta),
            "crosscheck_findings": _crosscheck_findings(pair, run, meta),
        }
        state["checks"]["binlog"] = {
            "status": "done",
            "reason": f"dbs {meta['master']['dbs']}, {meta['master']['files']}+{meta['replica']['files']} files",
        }

    # --- diff ------------------------------------------------------------------------------------
    def diff(self, pair: Pair, run: RunDir) -> None:
        state = run.require_stage(pair.name, "snapshot")
        if state["checks"].get("keyspace", {}).get("status") == "done":
            diff_keyspace(pair, run, state)
        if state["checks"].get("binlog", {}).get("status") == "done":
            self._diff_binlogs(pair, run, state)
        state["stages"]["diff"] = {"at_ms": int(time.time() * 1000)}
        run.save_state(pair.name, state)

    def _diff_binlogs(self, pair: Pair, run: RunDir, state: dict[str, Any]) -> None:
        from pyspark.sql import DataFrame
        from pyspark.sql import functions as F

        from audit.diff.binlog import binlog_findings, damage_findings
        from audit.diff.spark import get_spark

        spark = get_spark()
        started = time.time()
        work = run.work(pair.name) / "binlog"

        def stage(df: DataFrame, name: str) -> DataFrame:
            path = str(work / f"{name}.parquet")
            df.write.mode("overwrite").parquet(path)
            return spark.read.parquet(path)

        m, s = (spark.read.parquet(str(run.snapshot(pair.name, side) / BINLOG_SCAN)) for side in SIDES)
        assert pair.binlog is not None
        result = binlog_findings(m, s, run.run_id, pair.name, len(state["binlog"]["dbs"]), pair.binlog.file_size, stage)
        found, matched, lag = result.findings, result.matched, result.lag
        dmg = damage_findings(m, "master", run.run_id, pair.name).unionByName(
            damage_findings(s, "replica", run.run_id, pair.name)
        )
        found.unionByName(dmg).write.mode("overwrite").parquet(str(run.work(pair.name) / BINLOG_FINDINGS))
        where = F.when(F.col("m_epos") == F.col("s_epos"), "same").otherwise("shifted")
        how = {r["w"]: r["n"] for r in matched.groupBy(where.alias("w")).agg(F.count("*").alias("n")).collect()}
        sides = {
            side: df.where(F.col("row_kind") == "record")
            .agg(F.count("*").alias("n"), F.coalesce(F.sum(F.col("end") - F.col("start")), F.lit(0)).alias("b"))
            .first()
            for side, df in (("master", m), ("replica", s))
        }
        lag_rows = lag.collect()
        mt = state["metrics"]
        for side, row in sides.items():
            assert row is not None
            mt[f"{side}_binlog_records"] = row["n"]
        mt["binlog_records_aligned"] = how.get("same", 0)  # same content at the same (filenum, offset)
        mt["binlog_records_shifted"] = how.get("shifted", 0)  # same content, another offset: a gap or replay
        mt["binlog_unreplicated_records"] = sum(r["records"] for r in lag_rows)
        mt["binlog_unreplicated_bytes"] = sum(int(r["bytes"] or 0) for r in lag_rows)
        mt["binlog_diff_s"] = round(time.time() - started, 3)
        state["binlog"]["ahead"] = _producer_ahead(pair, run, state)

    # --- recheck, replication state, diagnosis, findings -----------------------------------------
    def recheck(self, pair: Pair, run: RunDir, resolver: ConnResolver | None) -> None:
        state = run.require_stage(pair.name, "diff")
        urls = _urls(pair, resolver)
        extra = [finding_from_row(row) for row in state.get("early_findings", [])]
        extra += [finding_from_row(row) for row in state.get("binlog", {}).get("ahead", [])]
        extra += [finding_from_row(row) for row in state.get("binlog", {}).get("crosscheck_findings", [])]
        with FindingsSink(run, pair.name, pair.kind) as sink:
            if urls is not None:
                master = connect(urls[0], role=f"{pair.name} master")
                replica = connect(urls[1], role=f"{pair.name} replica")
                first = self._pika_sample(master, replica)
                if state["checks"].get("keyspace", {}).get("status") == "done":
                    self._recheck_keyspace(pair, run, state, master, replica, sink)
                time.sleep(max(0.0, 1.1 - (time.time() * 1000 - first.at_ms) / 1000))
                samples = [first, self._pika_sample(master, replica)]
                if pair.check_replication and not state.get("early_findings"):
                    extra += self._replication(pair, state, samples, _host_port(urls[1])[1])
            if state["checks"].get("binlog", {}).get("status") == "done":
                sink.copy(run.work(pair.name) / BINLOG_FINDINGS)
            sink.add(extra)
        state["counts"] = sink.counts
        state["stages"]["recheck"] = {"at_ms": int(time.time() * 1000)}
        run.save_state(pair.name, state)

    def _pika_sample(self, master: redis.Redis, replica: redis.Redis) -> PikaSample:
        s_info, s_raw = _repl(replica)
        m_info, m_raw = _repl(master)
        return PikaSample(
            at_ms=int(time.time() * 1000), master=m_info, slave=s_info, raw={"master": m_raw, "replica": s_raw}
        )

    def _replication(
        self, pair: Pair, state: dict[str, Any], samples: list[PikaSample], slave_port: int
    ) -> list[Finding]:
        dbs = state["dbs"]
        size = _file_size(pair)
        state["replication_samples"] = [{"at_ms": s.at_ms, **s.raw} for s in samples]
        state["metrics"]["lag_bytes"] = lag_total(samples[-1], dbs, size)
        state["checks"]["replication"] = {"status": "done", "reason": f"{len(samples)} INFO samples, dbs {dbs}"}
        return pika_replication_findings(samples, dbs, slave_port, size, pair.gate.max_lag_bytes)


def _file_size(pair: Pair) -> int:
    """Pika's binlog-file-size for the pair: its `binlog.file_size`, else Pika's default."""
    return pair.binlog.file_size if pair.binlog is not None else defaults.PIKA_BINLOG_FILE_SIZE


def _crosscheck(meta: dict[str, Any]) -> dict[str, Any]:
    """INFO's binlog_offset next to the manifest's producer position, per side and db."""
    out: dict[str, Any] = {}
    for side, m in meta.items():
        info = m.get("info_binlog_offset")
        if info is None:
            continue
        out[side] = {
            d: {"info": info.get(d), "manifest": pos, "equal": info.get(d) == pos} for d, pos in m["manifest"].items()
        }
    return out


def _crosscheck_findings(pair: Pair, run: RunDir, meta: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for side, m in meta.items():
        for d, pos in (m.get("info_binlog_offset") or {}).items():
            manifest = m["manifest"].get(d)
            f = manifest_behind_info(side, int(d), BinlogOffset(*pos), tuple(manifest) if manifest else None)
            if f is not None:
                rows.append(f.to_row(run.run_id, pair.name, pair.kind))
    return rows


def _producer_ahead(pair: Pair, run: RunDir, state: dict[str, Any]) -> list[dict[str, Any]]:
    """`replica_ahead` rows for databases whose slave producer position is beyond the master's."""
    metas = {side: json.loads((run.snapshot(pair.name, side) / BINLOG_META).read_text()) for side in SIDES}
    rows = []
    for d in state["binlog"]["dbs"]:
        m_pos, s_pos = metas["master"]["manifest"].get(str(d)), metas["replica"]["manifest"].get(str(d))
        if not m_pos or not s_pos or tuple(s_pos) <= tuple(m_pos):
            continue
        size = _file_size(pair)
        ahead = (s_pos[0] - m_pos[0]) * size + s_pos[1] - m_pos[1]
        f = Finding(
            "binlog",
            "replica_ahead",
            db=d,
            bytes=ahead,
            start=f"{m_pos[0]}:{m_pos[1]}",
            end=f"{s_pos[0]}:{s_pos[1]}",
            start_num=m_pos[0] << 32 | m_pos[1],
            end_num=s_pos[0] << 32 | s_pos[1],
            evidence={
                "master_producer": f"{m_pos[0]}:{m_pos[1]}",
                "slave_producer": f"{s_pos[0]}:{s_pos[1]}",
                "source": "manifest",
            },
        )
        rows.append(f.to_row(run.run_id, pair.name, pair.kind))
    return rows
