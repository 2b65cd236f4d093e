"""Operators: each `execute()` builds its inputs and makes one replica-audit library call.

A failed gate raises AirflowFailException (no retry: the data diverges, retrying will not help); a
source that could not be audited raises AirflowException, so the task's retries apply.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from replica_audit_airflow.hooks import airflow_conn_resolver


def safe_run_id(airflow_run_id: str) -> str:
    """`manual__2026-11-21T10:00:00+00:00` -> a directory name without `:` or `+`."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", airflow_run_id)


class PlanPairsOperator(BaseOperator):
    """Returns the names of the inventory's pairs (all, or `pairs`), for dynamic task mapping."""

    template_fields: Sequence[str] = ("inventory", "pairs")

    def __init__(self, *, inventory: str, pairs: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.inventory = inventory
        self.pairs = pairs

    def execute(self, context: Any) -> list[str]:
        from audit import AuditError, load_inventory

        try:
            return [p.name for p in load_inventory(self.inventory).select(self.pairs or None)]
        except AuditError as e:
            raise AirflowFailException(str(e)) from None


class AuditStageOperator(BaseOperator):
    """One stage (snapshot, diff, recheck, gate) of one pair."""

    template_fields: Sequence[str] = ("inventory", "out_dir", "run_id", "pair")

    def __init__(self, *, stage: str, pair: str, inventory: str, out_dir: str, run_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stage, self.pair, self.inventory, self.out_dir, self.run_id = stage, pair, inventory, out_dir, run_id

    def execute(self, context: Any) -> Any:
        from audit import AuditError, SourceError, load_inventory, run_stage, start_run

        try:
            inv = load_inventory(self.inventory)
            run = start_run(inv, Path(self.out_dir), safe_run_id(self.run_id))
            verdict = run_stage(self.stage, inv.pair(self.pair), run, resolver=airflow_conn_resolver)
        except SourceError as e:
            raise AirflowException(f"{self.pair}: could not be audited: {e}") from None
        except AuditError as e:
            raise AirflowFailException(f"{self.pair}: {e}") from None
        if verdict is not None and not verdict["success"]:
            failed = ", ".join(f"{f['column']}={f['observed']} (max {f['threshold']})" for f in verdict["failed"])
            raise AirflowFailException(f"{self.pair}: gate failed: {failed}")
        return verdict


class AuditReportOperator(BaseOperator):
    """summary.json and report.html for the run; fails when any pair failed its gate or was not audited."""

    template_fields: Sequence[str] = ("inventory", "out_dir", "run_id", "pairs")

    def __init__(self, *, inventory: str, out_dir: str, run_id: str, pairs: list[str] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.inventory, self.out_dir, self.run_id, self.pairs = inventory, out_dir, run_id, pairs

    def execute(self, context: Any) -> dict[str, Any]:
        from audit import finish_run, load_inventory, start_run

        inv = load_inventory(self.inventory)
        run = start_run(inv, Path(self.out_dir), safe_run_id(self.run_id))
        summary = finish_run(inv, run, inv.select(self.pairs or None))
        verdicts = {p["pair"]: p["status"] for p in summary["pairs"]}
        self.log.info("run %s: %s %s; report %s", run.run_id, summary["verdict"], verdicts, run.report)
        if summary["exit_code"] != 0:
            raise AirflowFailException(f"audit {summary['verdict']}: {verdicts}; report: {run.report}")
        return {"verdict": summary["verdict"], "pairs": verdicts, "report": str(run.report)}
