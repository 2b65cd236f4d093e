"""Snapshot every node of a Redis fleet side as Spark tasks: one task per (side, shard), each with its own
connections, so a 30-shard cluster spreads over the executors (local mode: up to the cores).

Each task runs :func:`audit.sources.redis.snapshot.snapshot_side` on one node and leaves its part files
in its side's dataset directory, so the keyspace diff (`audit/diff/keyspace.py`, which reads a
path with `spark.read.parquet`) reads all shards of a side as one table, unchanged::

    <out_root>/<side>/keys.parquet/shard-000-10.0.0.5-7000-part-00000.parquet   # a shard's part files
    <out_root>/<side>/keys.parquet/shard-001-10.0.0.6-7000-part-00000.parquet
    <out_root>/<side>/shards/shard-000-10.0.0.5-7000/snapshot.json   # that node's snapshot.json
    <out_root>/<side>/snapshot.json                                  # the side: shards and summed stats

A cluster node is read on db 0 (SCAN on a node returns the keys it holds; a replica is read on a
READONLY connection). A pair's `keys:` filter goes to each node's reader (SCAN MATCH where one include
pattern allows it, the rest dropped per SCAN page before anything is read: `SnapshotOptions.match` and
`key_filter`); each node's snapshot.json says how many keys it left out. With `shard_as_db` each
shard's file is rewritten as it is moved into place, in row-group batches (bounded memory): the `db`
column becomes the shard's ordinal, so a replication audit joins a key of shard i on the master side
with the same key of shard i on the replica side only (a key that one shard's replica lacks and
another's has would otherwise look present). Map it back with :attr:`FleetSnapshot.shard_by_db`. A
migration between topologies leaves it off: keys are compared by (db, key) whichever node holds them.

Credentials never enter a DataFrame: the tasks' rows hold addresses; the URLs travel inside the task's
function (pickled with it, as the MySQL jobs' endpoints do), never in a plan's text or a row. No
broadcast variable: a Spark Connect client has none. A task that fails (node unreachable, snapshot
interrupted) returns an error row instead of failing the job, so the other shards are still snapshotted.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from audit.errors import AuditError
from audit.layout import write_text
from audit.sources.redis.keyfilter import KeyFilter
from audit.sources.redis.snapshot import KEYS_FILE, META_FILE, SNAPSHOT_SCHEMA, SnapshotOptions
from audit.sources.redis.topology import Topology
from audit.urls import redact_url

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SHARDS_DIR = "shards"


@dataclass(frozen=True, slots=True)
class SnapshotTask:
    """One node to snapshot. `url` holds the credentials: it stays out of the repr and of any DataFrame."""

    side: str
    ordinal: int  # the shard's position in the topology: file names and `shard_as_db`
    shard: str  # the shard's name (its master's address)
    node: str  # the address of the node read
    url: str = field(repr=False)
    dbs: tuple[int, ...] = (0,)
    readonly: bool = False  # a cluster replica: READONLY on every connection
    cluster: bool = False  # a cluster node: keys it holds but does not serve are resolved (see _settle)

    @property
    def file_stem(self) -> str:
        return f"shard-{self.ordinal:03d}-" + re.sub(r"[^A-Za-z0-9.-]+", "-", self.node)


def side_tasks(
    side: str, topology: Topology, *, dbs: Sequence[int] = (0,), replica_index: int | None = None
) -> list[SnapshotTask]:
    """The tasks of one side: each shard's master, or (with `replica_index`) each shard's i-th replica.

    A cluster side is read on db 0 whatever `dbs` says; a shard without an i-th replica gets no task.
    """
    cluster = topology.kind == "cluster"
    out = []
    for i, shard in enumerate(topology.shards):
        if replica_index is None:
            node = shard.master
        elif replica_index < len(shard.replicas):
            node = shard.replicas[replica_index]
        else:
            continue
        out.append(
            SnapshotTask(
                side=side,
                ordinal=i,
                shard=shard.name,
                node=node.addr,
                url=node.url,
                dbs=(0,) if cluster else tuple(dbs),
                readonly=cluster and replica_index is not None,
                cluster=cluster,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class TaskResult:
    side: str
    ordinal: int
    shard: str
    node: str
    status: str  # ok | error
    error: str | None
    keys_file: str | None
    rows: int
    filtered_out: int
    meta: dict[str, Any] | None  # the node's snapshot.json


@dataclass(frozen=True)
class FleetSnapshot:
    results: list[TaskResult]
    shard_by_db: dict[int, str]
    """with shard_as_db: the `db` value of each shard's rows -> the shard's name"""

    @property
    def errors(self) -> list[TaskResult]:
        return [r for r in self.results if r.status != "ok"]

    def side(self, side: str) -> list[TaskResult]:
        return [r for r in self.results if r.side == side]

    def comparable_paths(self, out_root: Path, sides: tuple[str, str] = ("master", "replica")) -> tuple[str, str]:
        """Paths (Hadoop globs) of each side's files for the shards both sides read: what a replication
        audit diffs when some shard could not be read (with `shard_as_db`, shard i pairs with shard i).

        Without failures these are the plain dataset directories. A shard whose master or replica
        failed is left out on both sides, so its keys are neither missing nor extra: the caller
        reports the shard as not audited (exit 3) instead.
        """
        ok = [{r.ordinal: r for r in self.side(s) if r.status == "ok"} for s in sides]
        every = [{r.ordinal for r in self.side(s)} for s in sides]
        both = sorted(set(ok[0]) & set(ok[1]))
        if all(set(o) == e for o, e in zip(ok, every, strict=True)) and every[0] == every[1]:
            return str(out_root / sides[0] / KEYS_FILE), str(out_root / sides[1] / KEYS_FILE)
        paths = []
        for side, results in zip(sides, ok, strict=True):
            names = [Path(results[i].keys_file or "").name for i in both]
            pattern = names[0] if len(names) == 1 else "{" + ",".join(names) + "}"
            paths.append(str(out_root / side / KEYS_FILE / pattern) if names else "")
        return paths[0], paths[1]


_RESULT_SCHEMA = pa.schema(
    [
        ("side", pa.string()),
        ("ordinal", pa.int32()),
        ("shard", pa.string()),
        ("node", pa.string()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("keys_file", pa.string()),
        ("rows", pa.int64()),
        ("filtered_out", pa.int64()),
        ("meta", pa.string()),
    ]
)


# --- one task, wherever it runs (a Spark Python worker or a driver thread) -------------------------------


def _redirected(table: pa.Table) -> pa.Array:
    """Rows of keys the node holds but does not serve: MOVED or ASK error replies (a slot being imported)."""
    err = pc.fill_null(table.column("error"), "")
    moved = pc.or_(pc.starts_with(err, "MOVED "), pc.starts_with(err, "ASK "))
    return pc.and_(pc.equal(table.column("status"), "error"), moved)


def _left_out(table: pa.Table, redirected: pa.Array, task: SnapshotTask, db: int | None) -> pa.Array:
    """Of a node's redirected rows, those whose keys are left out (or, in a migration, re-read where the
    cluster serves them). In a replication audit a shard master's ASK rows are not: ASK is its answer for
    a key of a slot it migrates that it no longer holds (moved between SCAN and the read), so the key is
    absent from the master's side, compared as such (audit/sources/redis/routing.py AskAbsentReader)."""
    if db is None or task.readonly:
        return redirected
    asked = pc.starts_with(pc.fill_null(table.column("error"), ""), "ASK ")
    return pc.and_(redirected, pc.invert(asked))


def _any_redirected(path: Path) -> bool:
    """Whether a keys file holds a MOVED/ASK row (only its status and error columns are read)."""
    table = pq.read_table(path, columns=["status", "error"])
    return bool(pc.any(_redirected(table)).as_py())


def _settle(src: Path, dst: Path, task: SnapshotTask, db: int | None) -> tuple[int, list[bytes]]:
    """Move one part file of a node's keys into the side's dataset, batch by batch: its db re-labelled
    (`db`), and, on a cluster node, the rows of keys it holds but does not serve (a slot it is importing:
    MOVED or ASK) taken out. Returns (rows written, the keys taken out but a master's absent ones: _left_out)."""
    if db is None and not (task.cluster and _any_redirected(src)):
        os.replace(src, dst)
        return int(pq.ParquetFile(dst).metadata.num_rows), []
    rows = 0
    redirected: list[bytes] = []
    source = pq.ParquetFile(src)
    schema = source.schema_arrow  # the snapshot's own schema (SNAPSHOT_SCHEMA), whatever its encoding
    db_at = schema.get_field_index("db")
    with pq.ParquetWriter(dst, schema, compression="zstd") as writer:
        for batch in source.iter_batches():
            table = pa.Table.from_batches([batch], schema=schema)
            if task.cluster:
                moved = _redirected(table)
                redirected += table.filter(_left_out(table, moved, task, db)).column("key").to_pylist()
                table = table.filter(pc.invert(moved))
            if db is not None:
                table = table.set_column(db_at, "db", pa.array([db] * table.num_rows, schema.field("db").type))
            rows += table.num_rows
            writer.write_table(table)
    src.unlink()
    return rows, redirected


def _settle_node(
    keys_dir: Path, dataset: Path, task: SnapshotTask, options: SnapshotOptions, db: int | None
) -> tuple[int, int]:
    """A node's part files into the side's dataset as `<stem>-part-NNNNN.parquet` (an empty part when it
    held no key, so the node's glob always matches). Keys of a slot the node is importing: a
    replication audit (`db` set) leaves them out, since the replica cannot serve them at all (the
    slot_migration finding says so); a migration re-reads them where the cluster serves them, redirects
    followed. Returns (rows, keys left out)."""
    rows = 0
    redirected: list[bytes] = []
    parts = sorted(keys_dir.glob("part-*.parquet")) if keys_dir.is_dir() else []
    for part in parts:
        n, keys = _settle(part, dataset / f"{task.file_stem}-{part.name}", task, db)
        rows += n
        redirected += keys
    if db is None and redirected:
        table = _reread(task, options, redirected, SNAPSHOT_SCHEMA)
        pq.write_table(table, dataset / f"{task.file_stem}-part-redirected.parquet")
        return rows + table.num_rows, 0
    if not parts:
        pq.write_table(SNAPSHOT_SCHEMA.empty_table(), dataset / f"{task.file_stem}-part-empty.parquet")
    return rows, len(redirected)


def _reread(task: SnapshotTask, options: SnapshotOptions, keys: list[bytes], schema: pa.Schema) -> pa.Table:
    """`keys` read where the cluster serves them (MOVED and ASK followed from this node), as snapshot rows."""
    from audit.sources.redis.routing import ClusterKeyReader
    from audit.sources.redis.topology import Node, Shard

    host, _, port = task.node.rpartition(":")
    seed = Topology("cluster", task.node, (Shard(Node(host.strip("[]"), int(port), task.url)),))
    reader = ClusterKeyReader(seed, page=options.page, window_bytes=options.window_bytes)
    try:
        states = [s for s in reader.read(keys, start_at=task.node) if s.status != "vanished"]
    finally:
        reader.close()
    columns: dict[str, list[Any]] = {"db": [0] * len(states)}
    for name in schema.names[1:]:
        columns[name] = [getattr(s, name) for s in states]
    return pa.Table.from_pydict(columns, schema=schema)


def run_task(
    task: SnapshotTask,
    out_root: Path,
    options: SnapshotOptions,
    shard_as_db: bool,
) -> TaskResult:
    """Snapshot one node; never raises for a source problem (the result says what went wrong)."""
    from audit.sources.redis.client import connect
    from audit.sources.redis.snapshot import snapshot_side

    side_dir = out_root / task.side
    stage = side_dir / SHARDS_DIR / task.file_stem
    dataset = side_dir / KEYS_FILE
    dataset.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(stage, ignore_errors=True)  # a fleet node is snapshotted whole: no checkpoint of an earlier try
    try:
        with connect(task.url, role=f"{task.side} shard {task.shard} node", readonly=task.readonly) as client:
            meta = snapshot_side(
                client,
                side=task.side,
                endpoint=redact_url(task.url),
                dbs=list(task.dbs),
                out_dir=stage,
                options=options,
            )
        db = task.ordinal if shard_as_db else None
        target = dataset / f"{task.file_stem}-part-*.parquet"  # a glob: Spark and comparable_paths read it
        rows, moving = _settle_node(stage / KEYS_FILE, dataset, task, options, db)
        dropped = int((meta.get("key_filter") or {}).get("filtered_out") or 0)
        meta["keys_in_moving_slots"] = moving
    except AuditError as e:
        return TaskResult(task.side, task.ordinal, task.shard, task.node, "error", str(e), None, 0, 0, None)
    except Exception as e:  # a task must report, not kill the job: the other shards still count
        msg = f"{task.side} {task.node}: {type(e).__name__}: {e}"
        return TaskResult(task.side, task.ordinal, task.shard, task.node, "error", msg, None, 0, 0, None)
    meta["shard"], meta["node"], meta["filtered_out"] = task.shard, task.node, dropped
    write_text(stage / META_FILE, json.dumps(meta, indent=1, sort_keys=True))  # whole or not at all
    return TaskResult(task.side, task.ordinal, task.shard, task.node, "ok", None, str(target), rows, dropped, meta)


def _spark_partition(
    urls: dict[int, str],
    out_root: str,
    options: SnapshotOptions,
    shard_as_db: bool,
    batches: Iterable[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: the partition's task rows (one per partition) -> one result row each."""
    for batch in batches:
        for row in batch.to_pylist():
            task = SnapshotTask(
                side=row["side"],
                ordinal=row["ordinal"],
                shard=row["shard"],
                node=row["node"],
                url=urls[row["task"]],
                dbs=tuple(row["dbs"]),
                readonly=row["readonly"],
                cluster=row["cluster"],
            )
            r = run_task(task, Path(out_root), options, shard_as_db)
            yield pa.RecordBatch.from_pylist([_result_row(r)], schema=_RESULT_SCHEMA)


def _result_row(r: TaskResult) -> dict[str, Any]:
    row = {name: getattr(r, name) for name in _RESULT_SCHEMA.names if name != "meta"}
    row["meta"] = json.dumps(r.meta) if r.meta is not None else None
    return row


def _from_row(row: Any) -> TaskResult:
    meta = json.loads(row["meta"]) if row["meta"] is not None else None
    fields = {n: row[n] for n in _RESULT_SCHEMA.names if n != "meta"}
    return TaskResult(**fields, meta=meta)


# --- the driver -----------------------------------------------------------------------------------------


def _interleave(tasks: Sequence[SnapshotTask]) -> list[SnapshotTask]:
    """Shard by shard, all sides together: a shard's two reads run close in time, as in the standalone path."""
    return sorted(tasks, key=lambda t: (t.ordinal, t.side))


def snapshot_fleet(
    tasks: Sequence[SnapshotTask],
    out_root: Path,
    options: SnapshotOptions,
    *,
    spark: SparkSession | None = None,
    key_filter: KeyFilter | None = None,
    shard_as_db: bool = False,
    threads: int = 2,
) -> FleetSnapshot:
    """Run every task (Spark tasks when `spark` is given, else `threads` driver threads); write each side's
    `snapshot.json`; return every task's result (errors included: the caller decides the exit code)."""
    ordered = _interleave(tasks)
    if key_filter is not None:
        options = replace(options, match=key_filter.scan_match(), key_filter=key_filter.keep)
    for side in {t.side for t in ordered}:
        shutil.rmtree(out_root / side / KEYS_FILE, ignore_errors=True)
    if not ordered:
        return FleetSnapshot([], {})
    if spark is None:
        with ThreadPoolExecutor(max(1, min(threads, len(ordered)))) as pool:
            results = list(pool.map(lambda t: run_task(t, out_root, options, shard_as_db), ordered))
    else:
        results = _run_spark(spark, ordered, out_root, options, shard_as_db)
    for side in sorted({t.side for t in ordered}):
        write_side_meta(out_root / side, [r for r in results if r.side == side])
    by_db = {t.ordinal: t.shard for t in ordered} if shard_as_db else {}
    return FleetSnapshot(results, by_db)


TASK_COLUMNS = (
    ("task", "int"),
    ("side", "string"),
    ("ordinal", "int"),
    ("shard", "string"),
    ("node", "string"),
    ("dbs", "array<int>"),
    ("readonly", "boolean"),
    ("cluster", "boolean"),
)


def tasks_frame(spark: SparkSession, tasks: Sequence[SnapshotTask]) -> DataFrame:
    """One row and one partition per task (audit/diff/task_frame.py); addresses only, the URLs stay out."""
    from audit.diff.task_frame import one_row_per_task

    rows = [(i, t.side, t.ordinal, t.shard, t.node, list(t.dbs), t.readonly, t.cluster) for i, t in enumerate(tasks)]
    return one_row_per_task(spark, TASK_COLUMNS, rows)


def _run_spark(
    spark: SparkSession,
    tasks: Sequence[SnapshotTask],
    out_root: Path,
    options: SnapshotOptions,
    shard_as_db: bool,
) -> list[TaskResult]:
    from pyspark.sql.pandas.types import from_arrow_schema

    urls = {i: t.url for i, t in enumerate(tasks)}
    body = functools.partial(_spark_partition, urls, str(out_root), options, shard_as_db)
    collected = tasks_frame(spark, tasks).mapInArrow(body, from_arrow_schema(_RESULT_SCHEMA)).collect()
    return [_from_row(r) for r in collected]


def write_side_meta(side_dir: Path, results: Sequence[TaskResult]) -> dict[str, Any]:
    """`<side>/snapshot.json`: the shards read, their stats summed, and the shards that failed."""
    totals: dict[str, int] = {}
    per_db: dict[str, int] = {}
    for r in results:
        stats = (r.meta or {}).get("stats", {})
        for k, v in stats.items():
            if isinstance(v, int):
                totals[k] = totals.get(k, 0) + v
        for db, n in stats.get("per_db", {}).items():
            per_db[str(db)] = per_db.get(str(db), 0) + int(n)
    metas = [r.meta for r in results if r.meta]
    keyspace: dict[str, int] = {}
    for m in metas:
        for db, v in ((m.get("start") or {}).get("info_keyspace") or {}).items():
            if isinstance(v, dict) and str(v.get("keys", "")).isdigit():
                keyspace[db] = keyspace.get(db, 0) + int(v["keys"])
    meta = {
        "side": results[0].side if results else side_dir.name,
        "shards": [
            {
                "shard": r.shard,
                "node": r.node,
                "status": r.status,
                "error": r.error,
                "rows": r.rows,
                "filtered_out": r.filtered_out,
                "duration_s": (r.meta or {}).get("duration_s"),
                "version": ((r.meta or {}).get("start", {}).get("info_server", {}) or {}).get("redis_version"),
            }
            for r in results
        ],
        "stats": {**totals, "per_db": per_db, "filtered_out": sum(r.filtered_out for r in results)},
        # what audit/verify.py reads of a side: a server's INFO server, and the keys the servers report
        "start": {
            "info_server": ((metas[0].get("start") or {}).get("info_server") if metas else None) or {},
            "info_keyspace": {db: {"keys": str(n)} for db, n in sorted(keyspace.items())},
        },
        "started_at_ms": min((m["started_at_ms"] for m in metas), default=None),
        "ended_at_ms": max((m["ended_at_ms"] for m in metas), default=None),
        "written_at_ms": int(time.time() * 1000),
    }
    side_dir.mkdir(parents=True, exist_ok=True)
    write_text(side_dir / META_FILE, json.dumps(meta, indent=1, sort_keys=True))  # whole or not at all
    return meta


__all__ = ["FleetSnapshot", "SnapshotTask", "TaskResult", "side_tasks", "snapshot_fleet", "write_side_meta"]
