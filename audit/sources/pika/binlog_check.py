"""The pika kind's binlog check: both sides' binlog files scanned in Spark and aligned record by record.

snapshot: each side's `log_db<N>/` found and scanned (the slave first, so its cut is older than the
master's and a healthy slave never holds a record the master's cut lacks), with the server's INFO
`binlog_offset` read just before each manifest and cross-checked against it.
diff: the alignment (audit/sources/pika/binlog_diff.py), damaged records, a slave producer beyond the
master's. Byte distances use the files' own lengths, so they hold whatever binlog-file-size is.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from audit.findings import Finding
from audit.kernel.check import Check, Uncovered
from audit.kernel.context import StageContext
from audit.kernel.state import MetricValue, PairState
from audit.layout import RunDir
from audit.sources.pika.binlog_diff import FileBases
from audit.sources.pika.file_chain import FileFacts
from audit.sources.pika.info import BinlogOffset
from audit.sources.pika.model import PikaPair
from audit.sources.pika.replication import manifest_behind_info
from audit.sources.pika.replication_check import FILE_SIZE_METRIC, read_replication
from audit.sources.redis.client import connect

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from audit.sources.pika.logfiles import DbLog

SIDES = ("master", "replica")
PAST_CUT_METRIC = "binlog_files_past_manifest"
BINLOG_SCAN = "binlog.parquet"
BINLOG_META = "binlog.json"
FINDINGS = "binlog_findings.parquet"


def scans(ctx: StageContext) -> tuple[DataFrame, DataFrame]:
    """Both sides' binlog scans, as the snapshot wrote them."""
    spark = ctx.spark()
    m, s = (spark.read.parquet(str(ctx.snapshot_dir(side) / BINLOG_SCAN)) for side in SIDES)
    return m, s


def keyspace_candidates(ctx: StageContext) -> DataFrame | None:
    """The keys the keyspace diff found differing (as findings), when the pair's keyspace was audited."""
    from audit.diff.findings import keyspace_findings
    from audit.sources.redis.keyspace_check import CANDIDATES

    keyspace = ctx.state.checks.get("keyspace")
    path = ctx.run.work(ctx.pair.name) / "keyspace" / CANDIDATES
    if keyspace is None or keyspace.status != "done" or not path.exists():
        return None
    return keyspace_findings(ctx.spark().read.parquet(str(path)), 0)


def annotate_with_binlogs(ctx: StageContext, findings: DataFrame) -> DataFrame:
    """Keyspace findings with what both binlogs say of each key (audit/sources/pika/layers.py), when the
    pair's binlogs were audited; the keyspace check calls this before it stages its findings."""
    from audit.sources.pika.layers import annotate_keyspace

    binlog = ctx.state.checks.get("binlog")
    if binlog is None or binlog.status != "done":
        return findings
    frontier = {int(db): int(pos) for db, pos in (ctx.state.check_data.get("binlog") or {}).get("frontier", {}).items()}
    m, s = scans(ctx)
    return annotate_keyspace(findings, m, s, frontier or None)


def _meta(ctx: StageContext, side: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((ctx.snapshot_dir(side) / BINLOG_META).read_text())
    return loaded


def crosscheck(meta: dict[str, Any]) -> dict[str, Any]:
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


def crosscheck_findings(meta: dict[str, Any]) -> list[Finding]:
    found = []
    for side, m in meta.items():
        for d, pos in (m.get("info_binlog_offset") or {}).items():
            manifest = m["manifest"].get(d)
            f = manifest_behind_info(side, int(d), BinlogOffset(*pos), tuple(manifest) if manifest else None)
            if f is not None:
                found.append(f)
    return found


def file_ends(master: DataFrame, replica: DataFrame) -> dict[str, dict[tuple[int, int], int]]:
    """Per side, where each (db, filenum) file's log ends: the end of its last row."""
    from pyspark.sql import functions as F

    return {
        side: {
            (r["db"], r["filenum"]): int(r["e"] or 0)
            for r in df.groupBy("db", "filenum").agg(F.max("end").alias("e")).collect()
        }
        for side, df in (("master", master), ("replica", replica))
    }


def file_chain(master: DataFrame, replica: DataFrame, metas: dict[str, dict[str, Any]]) -> list[Finding]:
    """corrupt_record findings for files missing, unreadable or cut short, per side and db (file_chain.py)."""
    from audit.sources.pika.file_chain import chain_findings

    found = []
    for side, df in (("master", master), ("replica", replica)):
        meta, seen = metas[side], _file_facts(df)
        for db, cut in meta.get("cut", {}).items():
            paths = meta["paths"][db]
            files = [replace(seen.get((int(db), int(n)), FileFacts(int(n), "")), path=p) for n, p in paths.items()]
            unreadable = [(int(n), str(p), str(why)) for n, p, why in meta["unreadable"][db]]
            found += chain_findings(side, int(db), meta["directories"][db], files, unreadable, cut)
    return found


def _file_facts(df: DataFrame) -> dict[tuple[int, int], FileFacts]:
    """Per (db, filenum) with rows: where its data ends, whether it is damaged, its first row."""
    from pyspark.sql import functions as F

    first = F.min(F.struct("start", "row_kind", "command", "prev_filenum", "prev_offset")).alias("first")
    rows = df.groupBy("db", "filenum").agg(
        F.max("end").alias("e"), F.max((F.col("row_kind") == "corrupt_record").cast("int")).alias("bad"), first
    )
    out = {}
    for r in rows.collect():
        f = r["first"]
        real = f["row_kind"] == "record" and f["command"] != "padding"  # a padding command embeds (0, 0)
        prev = (int(f["prev_filenum"]), int(f["prev_offset"])) if real else None
        out[r["db"], r["filenum"]] = FileFacts(r["filenum"], "", int(r["e"] or 0), bool(r["bad"]), f["row_kind"], prev)
    return out


def file_bases(ends: dict[str, dict[tuple[int, int], int]]) -> FileBases:
    """Where each file starts in its side's log, counted from the first file number both sides hold."""
    out: dict[str, dict[int, int]] = {}
    dbs = {db for side in ends.values() for db, _ in side}
    for side in SIDES:
        bases: dict[int, int] = {}
        for db in dbs:
            mine = sorted(f for d, f in ends[side] if d == db)
            theirs = [f for d, f in ends[_other(side)] if d == db]
            if not mine or not theirs:
                continue
            total = 0
            for f in mine:
                if f >= max(min(mine), min(theirs)):
                    bases[FileBases.key(db, f)] = total
                    total += ends[side][db, f]
        out[side] = bases
    return FileBases(master=out["master"], replica=out["replica"])


def _other(side: str) -> str:
    return "replica" if side == "master" else "master"


def byte_distance(bases: dict[int, int], db: int, pos: tuple[int, int]) -> int | None:
    base = bases.get(FileBases.key(db, pos[0]))
    return None if base is None else base + pos[1]


class BinlogCheck(Check):
    name = "binlog"
    coverage = (
        "master_binlog_files",
        "replica_binlog_files",
        "master_binlog_bytes",
        "replica_binlog_bytes",
        "master_binlog_records",
        "replica_binlog_records",
        "binlog_records_compared",
        "binlog_records_aligned",
        "binlog_records_shifted",
        "binlog_unreplicated_records",
        "binlog_unreplicated_bytes",
    )

    def __init__(self, pair: PikaPair) -> None:
        self.pair = pair

    # --- snapshot ------------------------------------------------------------------------------------
    def snapshot(self, ctx: StageContext) -> None:
        from audit.sources.pika.logfiles import discover, producer_positions, scan_logs

        if not self.pair.has_binlogs:
            ctx.skip("no binlog: {master_dir, replica_dir} given")
            return
        assert self.pair.binlog is not None
        dirs = {"master": self.pair.binlog.master_dir, "replica": self.pair.binlog.replica_dir}
        meta: dict[str, Any] = {}
        for side in ("replica", "master"):
            # INFO right before the manifest: the two should name the same producer position
            info = None
            if self.pair.has_servers:
                with connect(str(ctx.url(side)), role=f"{self.pair.name} {side}") as client:
                    info = read_replication(client)[0]
            logs = discover(Path(str(dirs[side])), self.pair.dbs, side)
            started = time.time()
            out = ctx.snapshot_dir(side)
            counts = scan_logs(ctx.spark(), logs, str(out / BINLOG_SCAN))
            positions = producer_positions(logs)
            meta[side] = {
                "dir": str(dirs[side]),
                "scan_s": round(time.time() - started, 3),
                **counts,
                "dbs": [log.db for log in logs],
                "manifest": {str(d): list(p) if p else None for d, p in positions.items()},
                "info_binlog_offset": {str(d): [o.filenum, o.offset] for d, o in info.binlog.items()} if info else None,
                "files": {str(log.db): [[f.filenum, f.size, f.logical_end] for f in log.files] for log in logs},
                "paths": {str(log.db): {str(f.filenum): f.path for f in log.files} for log in logs},
                "cut": {str(log.db): log.cut for log in logs},
                "unreadable": {str(log.db): [list(u) for u in log.unreadable] for log in logs},
                "past_cut": {str(log.db): [list(p) for p in log.past_cut] for log in logs},
                "directories": {str(log.db): log.directory for log in logs},
            }
            (out / BINLOG_META).write_text(json.dumps(meta[side], indent=1, sort_keys=True))
            ctx.metrics[f"{side}_binlog_files"] = counts["files"]
            ctx.metrics[f"{side}_binlog_bytes"] = counts["bytes"]
            ctx.metrics[f"{side}_binlog_scan_s"] = meta[side]["scan_s"]
            self._note_past_cut(ctx, side, logs)
        ctx.data["dbs"] = meta["master"]["dbs"]
        ctx.data["crosscheck"] = crosscheck(meta)
        ctx.add_findings(crosscheck_findings(meta))
        self._note_file_size(ctx, meta)
        # meta[side]["files"] is the per-db file list; the counts are the metrics
        files = [ctx.metrics[f"{side}_binlog_files"] for side in ("master", "replica")]
        ctx.done(f"dbs {meta['master']['dbs']}, {files[0]}+{files[1]} files")

    @staticmethod
    def _note_past_cut(ctx: StageContext, side: str, logs: list[DbLog]) -> None:
        """Files that were there before the manifest was read, numbered past it: the manifest is stale or
        damaged, and what they hold is not audited (gated through `uncovered`)."""
        past = [(log.directory, n) for log in logs for n, _ in log.past_cut]
        ctx.metrics[f"{side}_{PAST_CUT_METRIC}"] = len(past)
        for directory, n in past:
            ctx.state.notes.append(
                f"{side} binlog {directory}/write2file{n} lies past the manifest's producer position: not read"
            )

    def uncovered(self, metrics: Mapping[str, MetricValue]) -> list[Uncovered]:
        n = sum(int(metrics.get(f"{side}_{PAST_CUT_METRIC}") or 0) for side in SIDES)
        why = "binlog files past their side's manifest position (a stale or damaged manifest) were not read"
        return [Uncovered(n, f"{n} {why}: see the pair's notes")]

    def _note_file_size(self, ctx: StageContext, meta: dict[str, Any]) -> None:
        """Without `binlog.file_size` or the server's CONFIG, the binlog-file-size the files show: the
        shortest rolled file (Pika rolls a file once it reaches the size, so it runs past by one record
        at most)."""
        assert self.pair.binlog is not None
        if self.pair.binlog.file_size is not None:
            ctx.metrics[FILE_SIZE_METRIC] = self.pair.binlog.file_size
            return
        if ctx.metrics.get(FILE_SIZE_METRIC):
            return
        rolled = [
            size
            for m in meta.values()
            for files in m["files"].values()
            for _, size, end in files[:-1]
            if end is None and size > 0
        ]
        if rolled:
            ctx.metrics[FILE_SIZE_METRIC] = min(rolled)
            ctx.state.notes.append(f"binlog-file-size taken from the files: {min(rolled)} bytes")

    # --- diff ---------------------------------------------------------------------------------------
    def diff(self, ctx: StageContext) -> None:
        from pyspark.sql import functions as F

        from audit.diff.materialize import stager
        from audit.sources.pika.binlog_diff import binlog_findings, damage_findings
        from audit.sources.pika.layers import shipped_frontier

        spark = ctx.spark()
        started = time.time()
        work = ctx.work_dir()
        m, s = scans(ctx)
        bases = file_bases(file_ends(m, s))
        result = binlog_findings(m, s, len(ctx.data["dbs"]), bases, stager(spark, work))
        found = result.findings.unionByName(damage_findings(m, "master")).unionByName(damage_findings(s, "replica"))
        found.write.mode("overwrite").parquet(str(work / FINDINGS))  # staged by recheck, with each range's keys
        ctx.data["frontier"] = {str(db): pos for db, pos in shipped_frontier(result.matched).items()}
        where = F.when(F.col("m_epos") == F.col("s_epos"), "same").otherwise("shifted")
        how = {r["w"]: r["n"] for r in result.matched.groupBy(where.alias("w")).agg(F.count("*").alias("n")).collect()}
        records = {
            side: df.where(F.col("row_kind") == "record").count() for side, df in zip(SIDES, (m, s), strict=True)
        }
        for side, n in records.items():
            ctx.metrics[f"{side}_binlog_records"] = n
        lag_rows = result.lag.collect()
        unreplicated = sum(int(r["records"]) for r in lag_rows)
        ctx.metrics["binlog_records_aligned"] = how.get("same", 0)  # same content at the same (filenum, offset)
        ctx.metrics["binlog_records_shifted"] = how.get("shifted", 0)  # same content elsewhere: a gap or replay
        ctx.metrics["binlog_unreplicated_records"] = unreplicated
        ctx.metrics["binlog_unreplicated_bytes"] = sum(int(r["bytes"] or 0) for r in lag_rows)
        # the master's records up to the slave's last one: the rest is lag, not compared (the summary's "compared")
        ctx.metrics["binlog_records_compared"] = max(records["master"] - unreplicated, 0)
        ctx.metrics["binlog_diff_s"] = round(time.time() - started, 3)
        ctx.add_findings(self._producer_ahead(ctx, bases))
        ctx.add_findings(file_chain(m, s, {side: _meta(ctx, side) for side in SIDES}))
        if ctx.state.offsets is None:
            ctx.state.offsets = self._offsets(ctx, bases)

    # --- recheck: the keys each range touches, and what the slave's data shows of them ----------------
    def recheck(self, ctx: StageContext) -> None:
        from audit.sources.pika.range_keys import keys_of_ranges

        spark = ctx.spark()
        found = spark.read.parquet(str(ctx.work_dir() / FINDINGS))
        m, s = scans(ctx)
        ctx.add_findings_frame(keys_of_ranges(found, m, s, keyspace_candidates(ctx)))

    def headlines(self, run: RunDir, state: PairState) -> list[str]:
        from audit.sources.pika.layer_groups import layer_groups, render_groups

        return render_groups(layer_groups(run.findings_file(state.pair)))

    def _producer_ahead(self, ctx: StageContext, bases: FileBases) -> list[Finding]:
        """`replica_ahead` for databases whose slave producer position is beyond the master's."""
        metas = {side: _meta(ctx, side) for side in SIDES}
        found = []
        for d in ctx.data["dbs"]:
            m_pos, s_pos = metas["master"]["manifest"].get(str(d)), metas["replica"]["manifest"].get(str(d))
            if not m_pos or not s_pos or tuple(s_pos) <= tuple(m_pos):
                continue
            m_bytes = byte_distance(bases.master, d, tuple(m_pos))
            s_bytes = byte_distance(bases.replica, d, tuple(s_pos))
            ahead = s_bytes - m_bytes if m_bytes is not None and s_bytes is not None else None
            found.append(
                Finding(
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
            )
        return found

    def _offsets(self, ctx: StageContext, bases: FileBases) -> Any:
        """Each side's producer position per db, in bytes of its log (files-only audits have no INFO)."""
        from audit.kernel.state import Offsets
        from audit.sources.pika.replication_check import BINLOG_UNIT

        by_db: dict[str, dict[str, float | None]] = {}
        for side, side_bases in (("master", bases.master), ("replica", bases.replica)):
            for d, pos in _meta(ctx, side)["manifest"].items():
                at = byte_distance(side_bases, int(d), tuple(pos)) if pos else None
                by_db.setdefault(f"db{d}", {})[side] = float(at) if at is not None else None
        return Offsets(unit=BINLOG_UNIT, by_db=by_db) if by_db else None
