"""The row audit of a mysql pair, end to end: `audit_tables(...) -> RowsAudit`.

Catalogs (missing_table, extra_table, schema_mismatch) -> segments -> chunk work in Spark tasks ->
differing rows re-checked live in rounds -> findings (check `rows`), the repair plan, coverage
metrics and one digest per table and side for a certificate. Nothing is written to either server.
"""

from __future__ import annotations

import hashlib
import itertools
import pickle
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from audit.errors import AuditError, ConfigError, SnapshotError, SourceConnectError, SourceError
from audit.findings import Finding
from audit.sources.mysql import catalog, padded_keys
from audit.sources.mysql.chunks import BEHIND, ZERO, ChunkDone, Digest, Sides, Uncovered
from audit.sources.mysql.client import Server, connect_pair
from audit.sources.mysql.endpoint import MySQLEndpoint, MySQLSettings, parse_tables
from audit.sources.mysql.filters import ReplicationFilters, Status
from audit.sources.mysql.repair import RepairPlan, WholeRows, phase
from audit.sources.mysql.replication import following, master_identity, read_status
from audit.sources.mysql.row_diff import RowDiff
from audit.sources.mysql.rows import RecheckResult, recheck, to_finding
from audit.sources.mysql.spark_job import Job, TaskError, TaskStats, events, plan_segments
from audit.sources.mysql.sql import KeyValue
from audit.sources.mysql.values import TablePlan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FindingsSink = Callable[[list[Finding]], None]
_ERRORS: dict[str, type[AuditError]] = {
    "SourceConnectError": SourceConnectError,
    "SourceError": SourceError,
    "SnapshotError": SnapshotError,
    "ConfigError": ConfigError,
}


@dataclass
class TableResult:
    """One table's coverage and digests (the certificate lists these)."""

    table: str
    key: list[str] | None
    chunks: int = 0
    chunks_equal: int = 0
    chunks_different: int = 0
    chunks_uncovered: int = 0
    largest_chunk: int = 0
    """The most rows one chunk held (either side): a table compared in one pass counts whole."""
    master: Digest = ZERO
    replica: Digest = ZERO
    uncovered: list[str] = field(default_factory=list)
    compared: int = 0
    """Rows of the chunks judged (equal or different), the larger side's count of each: an uncovered
    chunk's rows are counted on each side but were not compared."""

    def as_dict(self, hash_function: str) -> dict[str, Any]:
        return {
            "table": self.table,
            "key": self.key,
            "chunks": self.chunks,
            "master_rows": self.master.count,
            "replica_rows": self.replica.count,
            "master_digest": f"{hash_function}-sum:{self.master.count}:{self.master.total:x}",
            "replica_digest": f"{hash_function}-sum:{self.replica.count}:{self.replica.total:x}",
            "equal": self.master == self.replica and not self.uncovered,
            "uncovered": self.uncovered,
        }


@dataclass
class RowsAudit:
    findings: list[Finding]
    """Every finding, unless `on_findings` received them (then empty)."""
    counts: dict[str, int]
    metrics: dict[str, float]
    tables: list[dict[str, Any]]
    """Per table: key, chunks, rows and digest per side, equal, uncovered reasons."""
    uncovered: list[dict[str, Any]]
    """What was not compared, each with the table, the key range or row, and why."""
    servers: dict[str, str]
    """Server versions, by side."""
    repair_path: Path | None = None
    repair_statements: int = 0
    filtered: list[dict[str, str]] = field(default_factory=list)
    """Tables the replica's replication filters keep from it, each with the filter: not compared."""

    def content(self, side: str) -> dict[str, Any]:
        """One side's content for a verification certificate: rows and digest per table, and overall.

        The overall digest is SHA-256 over the sorted `table count sum` lines, so it is equal on both
        sides exactly when every table's row count and row-hash sum are.
        """
        per_table = {t["table"]: t[f"{side}_digest"] for t in self.tables}
        lines = "\n".join(f"{name} {digest}" for name, digest in sorted(per_table.items()))
        return {
            "algorithm": "per table: COUNT(*) and SUM of the row hash; overall: sha256 of the sorted table lines",
            "digest": hashlib.sha256(lines.encode()).hexdigest(),
            "rows": sum(int(t[f"{side}_rows"]) for t in self.tables),
            "rows_per_table": {t["table"]: t[f"{side}_rows"] for t in self.tables},
            "digest_per_table": per_table,
        }


class Spill:
    """Differing rows beyond recheck_max_rows, pickled to an unnamed temporary file and read back when
    reported: a table the replica lacks every row of (a migration that skipped it) no longer holds
    every row in memory (300k rows of 200 bytes took 340 MB; tens of millions ended in an OOM kill)."""

    def __init__(self) -> None:
        self._file: IO[bytes] | None = None
        self.count = 0

    def append(self, diff: RowDiff) -> None:
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="replica-audit-rows-")
        pickle.dump(diff, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self.count += 1

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[RowDiff]:
        if self._file is None:
            return
        self._file.flush()
        self._file.seek(0)
        for _ in range(self.count):
            yield pickle.load(self._file)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


@dataclass
class _Run:
    plans: list[TablePlan]
    settings: MySQLSettings
    results: list[TableResult]
    candidates: list[RowDiff] = field(default_factory=list)
    overflow: Spill = field(default_factory=Spill)
    uncovered: list[dict[str, Any]] = field(default_factory=list)
    rows_read: dict[str, int] = field(default_factory=lambda: {"master": 0, "replica": 0})
    phases: dict[str, float] = field(default_factory=dict)

    def fold(self, event: object) -> None:
        if isinstance(event, TaskError):
            raise _ERRORS.get(event.error_type, SourceError)(event.message)
        if isinstance(event, TaskStats):
            for side, n in event.rows_read.items():
                self.rows_read[side] += n
        elif isinstance(event, ChunkDone):
            r = self.results[event.table]
            r.chunks += 1
            r.largest_chunk = max(r.largest_chunk, event.master.count, event.replica.count)
            r.master, r.replica = r.master + event.master, r.replica + event.replica
            setattr(r, f"chunks_{event.status}", getattr(r, f"chunks_{event.status}") + 1)
            if event.status != "uncovered":
                r.compared += max(event.master.count, event.replica.count)
        elif isinstance(event, RowDiff):
            full = len(self.candidates) >= self.settings.recheck_max_rows
            (self.overflow if full else self.candidates).append(event)
        elif isinstance(event, Uncovered):
            self.results[event.table].uncovered.append(event.reason)
            self.uncovered.append(
                {
                    "table": self.plans[event.table].display,
                    "from": _bound(event.lower),
                    "to": _bound(event.upper),
                    "rows": event.rows,
                    "reason": event.reason,
                }
            )


def _bound(bound: Sequence[KeyValue] | None) -> list[str] | None:
    return None if bound is None else [v.hex() if isinstance(v, bytes) else str(v) for v in bound]


def _parallelism(spark: SparkSession | None, settings: MySQLSettings) -> int:
    if settings.parallelism:
        return settings.parallelism
    if spark is None:
        return 1
    from audit.diff.spark import default_parallelism

    return default_parallelism(spark)


def audit_tables(
    spark: SparkSession | None,
    master_url: str,
    replica_url: str,
    tables: Sequence[str] | None = None,
    settings: MySQLSettings | None = None,
    work_dir: Path | None = None,
    check_replication: bool = True,
    *,
    pair: str = "",
    repair_path: Path | None = None,
    on_findings: FindingsSink | None = None,
) -> RowsAudit:
    """Compare the tables of a master and a replica row by row (docs/mysql.md).

    `spark` None runs the chunk work in this process (small audits, tests); `repair_path` defaults to
    `work_dir/repair/<pair>.sql` when a work_dir is given. Raises ConfigError (bad URL, table that
    does not exist: exit 2) and SourceError / SourceConnectError (unreachable, access denied: exit 3).
    """
    started = time.time()
    settings = settings or MySQLSettings()
    patterns = parse_tables(tables)
    master_ep = MySQLEndpoint.from_url(master_url, "master")
    replica_ep = MySQLEndpoint.from_url(replica_url, "replica")
    master, replica = connect_pair(master_ep, replica_ep, read_timeout_s=settings.read_timeout_s)
    sides = Sides(master, replica)
    try:
        folds = (catalog.folds_case(master), catalog.folds_case(replica))
        m_list, r_list, *own = catalog.align_names(catalog.list_tables(master), catalog.list_tables(replica), folds)
        catalog.probe_missing((master, replica), patterns, set(m_list) | set(r_list))
        names = catalog.select_tables(patterns, m_list, r_list, fold=any(folds))
        catalog.probe_one_sided((master, replica), names, (m_list, r_list))
        if not names:
            raise SourceError(
                f"no base table visible on master {master_ep.where} or replica {replica_ep.where}: "
                "the auditor needs SELECT on the tables to audit",
                where=master_ep.where,
            )
        ident = master_identity(master, master_ep) if check_replication else None
        link = following(read_status(replica), ident) if ident else None
        filtered = _filtered(link, names, folds[1])
        names = [n for n in names if n not in filtered]
        m_defs = catalog.load_definitions(master, [n for n in names if n in m_list], m_list, own[0])
        r_defs = catalog.load_definitions(replica, [n for n in names if n in r_list], r_list, own[1])
        plans, schema_findings = catalog.compare_catalogs(names, m_defs, r_defs)
        plans = padded_keys.probe((master, replica), plans, schema_findings, m_defs, r_defs)
        tasks = _parallelism(spark, settings)
        segments = plan_segments(master, replica, plans, tasks, settings)
        run = _Run(plans, settings, [TableResult(p.display, list(p.key) or None) for p in plans])
        job = Job(master_ep, replica_ep, tuple(plans), tuple(segments), settings, check_replication)
        t_chunks = time.time()
        for event in events(spark, job, tasks):
            run.fold(event)
        t_recheck = time.time()
        rechecked = recheck(sides, plans, run.candidates, settings, check_replication)
        run.phases = {
            "plan_s": t_chunks - started,
            "chunks_s": t_recheck - t_chunks,
            "recheck_s": time.time() - t_recheck,
        }
        if ident:  # read again: how the link stands once the replica has been waited for
            link = following(read_status(replica), ident)
        altered = _altered_tables((master, replica), plans, names, (m_list, r_list), (own[0], own[1]))
        servers = {"master": master.version, "replica": replica.version}
    finally:
        sides.close()

    gone = {i: f"altered during the audit: {e}" for i, e in rechecked.altered.items()}
    altered |= set(gone)
    for i in sorted(altered):
        reason = gone.get(i, "definition changed during the audit")
        run.results[i].uncovered.append(reason)
        run.uncovered.append({"table": plans[i].display, "rows": run.results[i].compared, "reason": reason})
        run.results[i].compared = 0  # its rows are not judged
    behind = f"{BEHIND} within {settings.gtid_wait_s}s when re-read"
    for d, reason in [
        *((d, _in_flight_reason(d)) for d in rechecked.in_flight),
        *((d, behind) for d in rechecked.behind),
    ]:
        undecided = 0 if d.table in altered else d.copies  # an altered table's rows are uncovered above
        run.results[d.table].compared -= undecided
        entry = {"table": plans[d.table].display, "row": _bound(d.key), "rows": undecided, "reason": reason}
        run.uncovered.append(entry)
    _say_why_behind(run.uncovered, link)
    checked = settings.recheck_rounds > 0

    def kept() -> Iterator[tuple[RowDiff, bool]]:
        """The differing rows to report, each with whether it was rechecked (read again: the spill)."""
        yield from ((d, checked) for d in rechecked.persisting if d.table not in altered)
        yield from ((d, False) for d in run.overflow if d.table not in altered)

    rows = (to_finding(plans[d.table], d, settings.hash_function, rechecked=r) for d, r in kept())
    findings, counts = _deliver(itertools.chain(schema_findings, rows), on_findings)
    if repair_path is None and work_dir is not None:
        repair_path = work_dir / "repair" / f"{pair or 'pair'}.sql"
    statements = 0
    if repair_path is not None:
        whole = WholeRows(master_ep, settings)  # long values are held as digests: re-read to be written
        mysql_json = master.flavor == "mysql"
        try:
            with RepairPlan(repair_path, replica_ep.shown, pair, mysql_json=mysql_json, whole=whole) as plan_file:
                for step in range(3):  # every DELETE, then every UPDATE, then every INSERT (repair.py)
                    for d, _ in kept():
                        if phase(d) == step:
                            _repair(plan_file, plans[d.table], d)
                statements = plan_file.statements
        finally:
            whole.close()
    metrics = _metrics(run, rechecked, plans, m_list, r_list, names, counts, started, len(segments))
    metrics["tables_filtered"] = len(filtered)
    run.overflow.close()
    return RowsAudit(
        findings=findings,
        counts=counts,
        metrics=metrics,
        tables=[r.as_dict(settings.hash_function) for r in run.results],
        uncovered=run.uncovered,
        servers=servers,
        repair_path=repair_path,
        repair_statements=statements,
        filtered=[{"table": f"{s}.{t}", "filter": why} for (s, t), why in filtered.items()],
    )


def _say_why_behind(uncovered: list[dict[str, Any]], row: Status | None) -> None:
    """Why the replica had not reached the master's position, when its status tells: a delay on purpose
    (MASTER_DELAY: behind by design) or a stopped thread (with its error); the reason read as a replica
    that had merely fallen behind."""
    why = _behind_because(row or {})
    for entry in uncovered:
        if why and str(entry.get("reason", "")).startswith(BEHIND):
            entry["reason"] += f" ({why})"


def _behind_because(row: Status) -> str:
    stopped = [t for t in ("IO", "SQL") if row.get(f"Slave_{t}_Running") not in (None, "Yes")]
    if stopped:
        error = row.get("Last_SQL_Error") or row.get("Last_IO_Error") or "no error given"
        return f"the replica's {' and '.join(stopped)} thread is not running: {error}"
    delay = int(row.get("SQL_Delay") or 0)
    return f"the replica applies MASTER_DELAY = {delay} s after the master, by design" if delay else ""


def _filtered(row: Status | None, names: list[catalog.TableName], fold: bool) -> dict[catalog.TableName, str]:
    """The tables the replica does not replicate from this master by design (filters.py), each with why."""
    rules = ReplicationFilters.from_status(row, fold) if row else None
    if not rules:
        return {}
    found = {n: rules.excluding(*n) for n in names}
    return {n: f"the replica's {why}: it does not replicate the table" for n, why in found.items() if why}


def _in_flight_reason(diff: RowDiff) -> str:
    if diff.suspect:
        return (
            "differed while the master was being written (it may have changed and come back while the "
            "replica was read), and no second round in a row found it again"
        )
    return "written on the master in every recheck round"


def _deliver(findings: Iterable[Finding], sink: FindingsSink | None) -> tuple[list[Finding], dict[str, int]]:
    """Findings to the sink in batches (then none kept), or all returned; and their counts per category."""
    counts: dict[str, int] = {}
    kept: list[Finding] = []
    for f in findings:
        counts[f.category] = counts.get(f.category, 0) + 1
        kept.append(f)
        if sink is not None and len(kept) >= 10_000:
            sink(kept)
            kept = []
    if sink is not None:
        if kept:
            sink(kept)
        kept = []
    return kept, counts


def _repair(plan_file: RepairPlan, plan: TablePlan, diff: RowDiff) -> None:
    if plan.signatures[0] != plan.signatures[1]:
        plan_file.note(
            f"{plan.display}: definitions differ; only the common columns are written "
            "(a column only the replica has keeps its value, or takes its default in an INSERTed row)"
        )
    plan_file.add(plan, [diff])


def _altered_tables(
    servers: tuple[Server, Server],
    plans: list[TablePlan],
    names: list[catalog.TableName],
    lists: tuple[dict[catalog.TableName, int], dict[catalog.TableName, int]],
    own: tuple[catalog.Spellings, catalog.Spellings],
) -> set[int]:
    """Tables whose definition (either side) is not the one planned with."""
    by_name = {(p.schema, p.name): i for i, p in enumerate(plans)}
    wanted = [n for n in names if n in by_name]
    now_m = catalog.load_definitions(servers[0], wanted, lists[0], own[0])
    now_r = catalog.load_definitions(servers[1], wanted, lists[1], own[1])
    out = set()
    for name, i in by_name.items():
        m, r = now_m.get(name), now_r.get(name)
        if m is None or r is None or (m.signature(), r.signature()) != plans[i].signatures:
            out.add(i)
    return out


def _metrics(
    run: _Run,
    rechecked: RecheckResult,
    plans: list[TablePlan],
    m_list: dict[catalog.TableName, int],
    r_list: dict[catalog.TableName, int],
    names: list[catalog.TableName],
    counts: dict[str, int],
    started: float,
    segments: int,
) -> dict[str, float]:
    res = run.results
    uncovered_rows = sum(int(u.get("rows") or 0) for u in run.uncovered)
    return {
        "tables_selected": len(names),
        "tables_master": sum(1 for n in names if n in m_list),
        "tables_replica": sum(1 for n in names if n in r_list),
        "tables_compared": len(plans),
        "tables_keyless": sum(1 for p in plans if not p.key),
        "segments": segments,
        "chunks": sum(r.chunks for r in res),
        "chunks_equal": sum(r.chunks_equal for r in res),
        "chunks_different": sum(r.chunks_different for r in res),
        "chunks_uncovered": sum(r.chunks_uncovered for r in res),
        "largest_chunk_rows": max((r.largest_chunk for r in res), default=0),
        "master_rows": sum(r.master.count for r in res),
        "replica_rows": sum(r.replica.count for r in res),
        "rows_compared": sum(r.compared for r in res),
        "master_rows_shipped": run.rows_read["master"],
        "replica_rows_shipped": run.rows_read["replica"],
        "row_candidates": len(run.candidates) + len(run.overflow),
        "rows_unrechecked": len(run.overflow),
        "rows_converged": rechecked.converged,
        "rows_in_flight": len(rechecked.in_flight),
        "rows_replica_behind": len(rechecked.behind),
        "recheck_rounds_run": rechecked.rounds_run,
        "uncovered": len(run.uncovered),
        "uncovered_rows": uncovered_rows,
        "duration_s": round(time.time() - started, 3),
        **{k: round(v, 3) for k, v in run.phases.items()},
        **{f"findings_{c}": n for c, n in counts.items()},
    }
