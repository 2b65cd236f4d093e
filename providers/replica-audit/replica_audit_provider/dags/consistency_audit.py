"""
### consistency_audit

Audits every master/replica pair of the inventory: **snapshot → diff → recheck → gate** per pair
(one mapped task group per pair), then **verdict** (the pair's asset event) and **report** for the run.

- A source that cannot be reached or read fails `snapshot` (or `recheck`) only after its retries,
  with exponential backoff; nothing else is retried: a failed gate fails its `gate` task at once.
- A failed gate, or a pair that could not be audited, fails the `report` task and so the run.
- Each pair's asset `replica-audit://<pair>` gets an event per run whose extra is the pair's verdict
  (`status`, `divergences`, `counts`, `failed_checks`), whatever the verdict was.

- **prune** (retention, off by default): once the pairs are audited, deletes old runs under `out` (and
  the verification runs under `out/verifications`) as `replica-audit prune` does: whole runs that ended
  more than `keep_days` ago, the snapshots and work files of runs that ended more than `keep_snapshot_days`
  ago, never the `keep_last` newest finished runs nor an unfinished one (this run is unfinished until its
  report). It runs beside `report`, not after it,
  so `report` stays the task whose failure fails the DAG run; a path it cannot delete fails `prune`.

Params: `inventory` (YAML path), `out` (output directory; each run writes `out/<run_id>/`),
`pairs` (optional subset), `keep_days`, `keep_snapshot_days` (empty: not pruned by that age) and
`keep_last`. Defaults come from REPLICA_AUDIT_INVENTORY / REPLICA_AUDIT_OUT / REPLICA_AUDIT_KEEP_DAYS /
REPLICA_AUDIT_KEEP_SNAPSHOT_DAYS / REPLICA_AUDIT_KEEP_LAST (1); the schedule from REPLICA_AUDIT_SCHEDULE
(hourly by default).
"""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk import DAG, Param, TriggerRule, task_group

from replica_audit_provider.dags.arguments import dag_arguments, schedule_from_env
from replica_audit_provider.dags.templates import text
from replica_audit_provider.operators import (
    SOURCE_RETRY_ARGS,
    STAGES,
    AuditReportOperator,
    AuditStageOperator,
    PairVerdictOperator,
    PlanPairsOperator,
    PruneOperator,
)

INVENTORY = text("params.inventory")
OUT = text("params.out")
RUN_ID = text("run_id")
PAIRS = "{{ params.pairs }}"


def _retention_param(variable: str, default: float | None, description: str, whole: bool = False) -> Param:
    """A retention setting's Param, its default from `variable` (empty or unset: `default`)."""
    value = os.environ.get(variable, "").strip()
    try:
        given = (int(value) if whole else float(value)) if value else default
    except ValueError:
        raise ValueError(f"{variable}={value!r}: expected a number of days (or of runs)") from None
    kind = "integer" if whole else "number"
    # a count of runs to keep starts at 1: the newest finished run is always kept
    return Param(given, type=[kind] if whole else ["null", kind], minimum=1 if whole else 0, description=description)


def consistency_audit_dag(dag_id: str = "consistency_audit", **dag_kwargs: Any) -> DAG:
    """The audit DAG; `dag_kwargs` override the DAG's arguments (schedule, tags, ...)."""
    kwargs: dict[str, Any] = {
        "doc_md": __doc__,
        "schedule": schedule_from_env("REPLICA_AUDIT_SCHEDULE", "@hourly"),
        "catchup": False,
        "max_active_runs": 1,
        "render_template_as_native_obj": True,  # `pairs` stays a list
        "tags": ["replica-audit", "consistency"],
        "default_args": SOURCE_RETRY_ARGS,
        "params": {
            "inventory": Param(
                os.environ.get("REPLICA_AUDIT_INVENTORY", "/opt/replica-audit/inventory.yaml"),
                type="string",
                description="inventory YAML path",
            ),
            "out": Param(
                os.environ.get("REPLICA_AUDIT_OUT", "/opt/replica-audit/out"),
                type="string",
                description="output directory",
            ),
            "pairs": Param([], type="array", items={"type": "string"}, description="only these pairs (empty: all)"),
            "keep_days": _retention_param(
                "REPLICA_AUDIT_KEEP_DAYS", None, "delete runs that ended more than N days ago (empty: never)"
            ),
            "keep_snapshot_days": _retention_param(
                "REPLICA_AUDIT_KEEP_SNAPSHOT_DAYS",
                None,
                "delete the snapshots and work files of runs that ended more than N days ago (empty: never)",
            ),
            "keep_last": _retention_param(
                "REPLICA_AUDIT_KEEP_LAST", 1, "always keep the N newest finished runs whole", whole=True
            ),
        },
    }
    with DAG(dag_id=dag_id, **dag_arguments(kwargs, dag_kwargs)) as dag:
        plan = PlanPairsOperator(task_id="plan", inventory=INVENTORY, pairs=PAIRS)

        @task_group(group_id="audit_pair")
        def audit_pair(pair: str) -> None:
            stages = [
                AuditStageOperator(
                    task_id=stage, stage=stage, pair=pair, inventory=INVENTORY, out_dir=OUT, run_id=RUN_ID
                )
                for stage in STAGES
            ]
            verdict = PairVerdictOperator(
                task_id="verdict", pair=pair, out_dir=OUT, run_id=RUN_ID, trigger_rule=TriggerRule.ALL_DONE, retries=0
            )
            stages[0] >> stages[1] >> stages[2] >> stages[3] >> verdict

        report = AuditReportOperator(
            task_id="report",
            inventory=INVENTORY,
            out_dir=OUT,
            run_id=RUN_ID,
            pairs=PAIRS,
            trigger_rule=TriggerRule.ALL_DONE,
            retries=0,
        )
        prune = PruneOperator(
            task_id="prune",
            out_dir=OUT,
            keep_days="{{ params.keep_days }}",
            keep_snapshot_days="{{ params.keep_snapshot_days }}",
            keep_last="{{ params.keep_last }}",
            trigger_rule=TriggerRule.ALL_DONE,
            retries=0,
        )
        audit_pair.expand(pair=plan.output) >> [report, prune]
    return dag
