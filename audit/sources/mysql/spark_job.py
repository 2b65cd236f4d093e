"""Chunk work as Spark tasks: one task per segment, each with its own sessions on both servers.

Segments split a big table's key space so that its chunks are checksummed (and differing ones
narrowed) by several tasks at once; a table under `min_segment_rows` rows is one segment. A task
opens one read-only session per side, walks its segments (chunks.TableWork.walk) and returns each
event pickled in an Arrow row, streamed back to the driver with toLocalIterator, so the driver holds
one partition's events at a time. Errors the auditor understands (unreachable server, missing
privilege) travel back as events and are raised again, with their type, on the driver.

The endpoints (password included) reach the tasks inside the task closure, never in a DataFrame, so
they appear in no plan, log or UI. On a cluster the executors must reach both servers.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING

import pyarrow as pa

from audit.errors import AuditError
from audit.sources.mysql.chunks import Event, Segment, Sides, TableWork
from audit.sources.mysql.client import Server, TableGone, connect
from audit.sources.mysql.endpoint import MySQLEndpoint, MySQLSettings
from audit.sources.mysql.row_diff import Key, decode_key
from audit.sources.mysql.sql import INT_TYPES, TableSql, quote_ident, table_ref
from audit.sources.mysql.values import TablePlan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_EVENTS = pa.schema([("event", pa.binary())])
_FLUSH_EVENTS = 256


@dataclass(frozen=True)
class Job:
    master: MySQLEndpoint
    replica: MySQLEndpoint
    plans: tuple[TablePlan, ...]
    segments: tuple[Segment, ...]
    settings: MySQLSettings
    check_replication: bool


@dataclass(frozen=True)
class TaskStats:
    """What one task read, per side: rows shipped and queries sent."""

    rows_read: dict[str, int] = field(default_factory=dict)
    queries: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskError:
    error_type: str
    message: str
    where: str


def open_sides(job: Job) -> Sides:
    m = connect(job.master, "master", read_timeout_s=job.settings.read_timeout_s)
    try:
        r = connect(job.replica, "replica", read_timeout_s=job.settings.read_timeout_s)
    except BaseException:
        m.close()
        raise
    return Sides(m, r)


def run_segments(
    job: Job, indexes: Iterable[int], sides: Sides | None = None
) -> Iterator[Event | TaskStats | TaskError]:
    """The events of the segments `indexes`, on `sides` or on sessions of its own."""
    own = sides is None
    try:
        if sides is None:
            sides = open_sides(job)
        for i in indexes:
            seg = job.segments[i]
            work = TableWork(sides, job.plans[seg.table], seg.table, job.settings, job.check_replication)
            yield from work.walk(seg)
        yield TaskStats(
            {"master": sides.master.rows_read, "replica": sides.replica.rows_read},
            {"master": sides.master.queries, "replica": sides.replica.queries},
        )
    except AuditError as e:
        yield TaskError(type(e).__name__, str(e), getattr(e, "where", ""))
    finally:
        if own and sides is not None:
            sides.close()


def _task(job: Job, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    indexes = [i for b in batches for group in b.column("segments").to_pylist() for i in group]
    buffer: list[bytes] = []
    for event in run_segments(job, indexes):
        buffer.append(pickle.dumps(event))
        if len(buffer) >= _FLUSH_EVENTS:
            yield pa.RecordBatch.from_pydict({"event": buffer}, schema=_EVENTS)
            buffer = []
    if buffer:
        yield pa.RecordBatch.from_pydict({"event": buffer}, schema=_EVENTS)


def assign(weights: Sequence[float], tasks: int) -> list[list[int]]:
    """Segments spread over at most `tasks` tasks, heaviest first onto the lightest task (LPT)."""
    groups: list[list[int]] = [[] for _ in range(max(1, min(tasks, len(weights))))]
    loads = [0.0] * len(groups)
    for i in sorted(range(len(weights)), key=lambda i: -weights[i]):
        k = loads.index(min(loads))
        groups[k].append(i)
        loads[k] += max(weights[i], 1.0)
    return [g for g in groups if g]


def segment_weights(job: Job) -> list[float]:
    per_table: dict[int, int] = {}
    for seg in job.segments:
        per_table[seg.table] = per_table.get(seg.table, 0) + 1
    return [job.plans[seg.table].rows_estimate / per_table[seg.table] for seg in job.segments]


def events(spark: SparkSession | None, job: Job, tasks: int = 1) -> Iterator[Event | TaskStats | TaskError]:
    """Every segment's events: in at most `tasks` Spark tasks (each reusing its two sessions for all of
    its segments), or in this process when `spark` is None."""
    groups = assign(segment_weights(job), tasks)
    if spark is None or not job.segments:
        yield from run_segments(job, [i for g in groups for i in g])
        return
    from pyspark.sql.pandas.types import from_arrow_schema

    from audit.diff.task_frame import one_row_per_task

    frame = one_row_per_task(spark, [("segments", "array<int>")], [(g,) for g in groups])
    for row in frame.mapInArrow(partial(_task, job), from_arrow_schema(_EVENTS)).toLocalIterator():
        yield pickle.loads(row["event"])


# --- planning segments (driver) ---------------------------------------------------------------------------


def _int_span(master: Server, replica: Server, plan: TablePlan) -> tuple[int, int] | None:
    k = quote_ident(plan.key[0])
    sql = f"SELECT MIN({k}), MAX({k}) FROM {table_ref(plan.schema, plan.name)}"
    values = [v for s in (master, replica) for row in [s.one(sql, "reading the key range")] for v in row or ()]
    # Decimal: the replica's key may be a DECIMAL or DOUBLE a migration made of the master's INT ('1.00')
    numbers = [Decimal(v.decode()) for v in values if v is not None]
    return (math.floor(min(numbers)), math.ceil(max(numbers))) if numbers else None


def plan_segments(
    master: Server, replica: Server, plans: Sequence[TablePlan], parallelism: int, settings: MySQLSettings
) -> list[Segment]:
    """Each table's key space in up to `parallelism` segments of about equal rows."""
    out: list[Segment] = []
    for i, plan in enumerate(plans):
        n = max(1, min(parallelism, plan.rows_estimate // settings.min_segment_rows))
        try:
            if not plan.key or not plan.ranges:
                out.append(Segment(i, None, None))
            elif len(plan.key) == 1 and plan.key_columns[0].data_type in INT_TYPES:
                out.extend(_int_segments(master, replica, plan, i, n))
            else:
                out.extend(_offset_segments(master, plan, i, n, settings))
        except TableGone:  # dropped or altered since listed: its walk meets it again and reports it uncovered
            out.append(Segment(i, None, None))
    return out


def _int_segments(master: Server, replica: Server, plan: TablePlan, i: int, n: int) -> list[Segment]:
    span = _int_span(master, replica, plan)
    if span is None:
        return [Segment(i, None, None)]
    lo, hi = span
    density = max(plan.rows_estimate, 1) / (hi - lo + 1)
    cuts = sorted({lo + j * (hi - lo + 1) // n for j in range(1, n)} - {lo})
    bounds: list[tuple[int, ...] | None] = [None, *((c,) for c in cuts), None]
    return [Segment(i, bounds[j], bounds[j + 1], span, density) for j in range(len(bounds) - 1)]


def _offset_segments(master: Server, plan: TablePlan, i: int, n: int, settings: MySQLSettings) -> list[Segment]:
    sql = TableSql(plan, "master", settings.hash_function)
    cuts: list[Key] = []
    for j in range(1, n):
        row = master.one(sql.boundary(None, None, j * plan.rows_estimate // n), "splitting a table over tasks")
        if row is not None:
            cut = decode_key(plan, row)
            if not cuts or cut != cuts[-1]:
                cuts.append(cut)
    bounds: list[Key | None] = [None, *cuts, None]
    return [Segment(i, bounds[j], bounds[j + 1]) for j in range(len(bounds) - 1)]
