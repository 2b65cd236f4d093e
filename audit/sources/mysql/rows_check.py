"""The mysql kind's row check: every selected table compared row by row (audit/sources/mysql/engine.py).

The work is one pass in the diff stage: server-side checksums of key-range chunks on both sides (in
Spark tasks), differing chunks narrowed to rows, rows re-checked live in rounds. Nothing is written to
either server; the repair plan goes to `OUT/<run>/repair/<pair>.sql` and is never executed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from audit.kernel.check import Check, Uncovered
from audit.kernel.context import StageContext
from audit.kernel.state import MetricValue, PairState
from audit.layout import RunDir
from audit.sources.mysql.model import MySQLPair

SIDES = ("master", "replica")
UNCOVERED_SHOWN = 50


class RowsCheck(Check):
    name = "rows"
    coverage = (
        "tables_selected",
        "tables_master",
        "tables_replica",
        "tables_compared",
        "tables_keyless",
        "tables_filtered",
        "chunks",
        "chunks_equal",
        "chunks_different",
        "chunks_uncovered",
        "master_rows",
        "replica_rows",
        "rows_compared",
        "master_rows_shipped",
        "replica_rows_shipped",
        "row_candidates",
        "rows_converged",
        "rows_in_flight",
        "rows_unrechecked",
    )

    def __init__(self, pair: MySQLPair) -> None:
        self.pair = pair

    def diff(self, ctx: StageContext) -> None:
        from audit.sources.mysql.engine import audit_tables

        repair = ctx.run.root / "repair" / f"{self.pair.name}.sql"
        result = audit_tables(
            ctx.spark(),
            str(ctx.url("master")),
            str(ctx.url("replica")),
            self.pair.tables,
            self.pair.settings,
            ctx.work_dir(),
            self.pair.check_replication,
            pair=self.pair.name,
            repair_path=repair,
            on_findings=ctx.add_findings,
        )
        ctx.metrics.update({k: v for k, v in result.metrics.items() if not k.startswith("findings_")})
        ctx.metrics["recheck_in_flight"] = result.metrics.get("rows_in_flight", 0)
        for side in SIDES:
            if not ctx.state.servers.get(side, {}).get("version"):
                ctx.state.servers.setdefault(side, {})["version"] = result.servers.get(side)
        ctx.data["tables"] = result.tables
        ctx.data["uncovered"] = result.uncovered[:UNCOVERED_SHOWN]
        ctx.data["filtered"] = result.filtered
        ctx.data["content"] = {side: result.content(side) for side in SIDES}
        if result.repair_path is not None and result.repair_statements:
            ctx.state.artifacts["repair plan"] = str(Path(result.repair_path).relative_to(ctx.run.root))
        elif result.repair_path is not None:  # nothing to repair: no plan, as for a keyspace
            Path(result.repair_path).unlink(missing_ok=True)
        ctx.done(f"{len(result.tables)} tables")

    def uncovered(self, metrics: Mapping[str, MetricValue]) -> list[Uncovered]:
        n = int(metrics.get("uncovered") or 0)
        rows = int(metrics.get("uncovered_rows") or 0)
        unrechecked = int(metrics.get("rows_unrechecked") or 0)
        filtered = int(metrics.get("tables_filtered") or 0)
        return [
            Uncovered(
                filtered,
                f"{filtered} tables the replica's replication filters keep from it, not compared by design: "
                "see the pair's state, check_data.rows.filtered",
                gated=False,
            ),
            Uncovered(n, f"{n} table ranges or rows not compared ({rows} rows): see the pair's state, check_data.rows"),
            Uncovered(
                unrechecked,
                f"{unrechecked} differing rows reported without a live recheck (over recheck_max_rows)",
                gated=False,
            ),
        ]

    def certify(self, run: RunDir, state: PairState, side: str) -> dict[str, Any]:
        content = (state.check_data.get(self.name) or {}).get("content") or {}
        tables = (state.check_data.get(self.name) or {}).get("tables") or []
        return {"content": content.get(side), "tables": tables} if content else {}
