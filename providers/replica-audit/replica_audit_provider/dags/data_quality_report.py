"""
### data_quality_report

Daily: reads the results history of the audit runs (the store every run is appended to) and renders
`out/reports/daily-<date>.html`: per pair the latest verdict, divergences by category over time, lag
over time, master vs replica offsets where measured, and the recent runs with links to their
report.html and Great Expectations Data Docs.

Params: `out` (the audits' output directory, default REPLICA_AUDIT_OUT), `history` (the store's URL;
empty: REPLICA_AUDIT_HISTORY, else `out/history.sqlite`), `days` (how far back, default 7).
"""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk import DAG, Param

from replica_audit_provider.dags.arguments import dag_arguments, schedule_from_env
from replica_audit_provider.dags.templates import text
from replica_audit_provider.operators import SOURCE_RETRY_ARGS, DailyReportOperator


def data_quality_report_dag(dag_id: str = "data_quality_report", **dag_kwargs: Any) -> DAG:
    """The daily report DAG; `dag_kwargs` override the DAG's arguments."""
    kwargs: dict[str, Any] = {
        "doc_md": __doc__,
        "schedule": schedule_from_env("REPLICA_AUDIT_REPORT_SCHEDULE", "@daily"),
        "catchup": False,
        "max_active_runs": 1,
        "render_template_as_native_obj": True,  # `days` stays a number
        "tags": ["replica-audit", "report"],
        "default_args": SOURCE_RETRY_ARGS,
        "params": {
            "out": Param(
                os.environ.get("REPLICA_AUDIT_OUT", "/opt/replica-audit/out"),
                type="string",
                description="the audits' output directory; the report goes to out/reports/",
            ),
            "history": Param(
                # not $REPLICA_AUDIT_HISTORY's value: a default is stored with the DAG, and that URL may
                # hold a password. Empty reads the variable on the worker when the task runs.
                "",
                type="string",
                description="history store URL (empty: $REPLICA_AUDIT_HISTORY on the worker, else out/history.sqlite)",
            ),
            "days": Param(7, type="integer", minimum=1, maximum=366, description="days of history in the report"),
        },
    }
    with DAG(dag_id=dag_id, **dag_arguments(kwargs, dag_kwargs)) as dag:
        DailyReportOperator(
            task_id="render",
            out_dir=text("params.out"),
            history=text("params.history"),
            days="{{ params.days }}",
            as_of="{{ dag_run.run_after.isoformat() }}",
        )
    return dag
