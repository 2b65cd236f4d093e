"""The operators' arguments: a typo fails when the DAG file is parsed, a value native rendering turned
into a number fails the task saying so, and the DAGs' templates keep text as text."""

from __future__ import annotations

import os
from pathlib import Path

from tests.dags.conftest import script_said

SCRIPT = """
import json
from jinja2.nativetypes import NativeEnvironment
from airflow.sdk.exceptions import AirflowFailException
from replica_audit_provider import operators as ops
from replica_audit_provider.dags.arguments import schedule_from_env
from replica_audit_provider.dags.templates import text
import os

from audit.pipeline import STAGES
said = {"stages_match": list(ops.STAGES) == list(STAGES)}
for name, make in {
    "stage": lambda: ops.AuditStageOperator(
        task_id="s", stage="snpashot", pair="p", inventory="i", out_dir="o", run_id="r"
    ),
    "days": lambda: ops.DailyReportOperator(task_id="d", out_dir="o", days="seven"),
}.items():
    try:
        make()
        said[name] = "built"
    except ValueError as e:
        said[name] = str(e)
ops.DailyReportOperator(task_id="d2", out_dir="o", days="{{ params.days }}")  # a template is rendered later
try:
    ops.safe_run_id(48213)
except AirflowFailException as e:
    said["run_id"] = str(e)
native = NativeEnvironment()
odd = "a'b" + chr(92) + chr(34) + "<c>é" + chr(0x1F600) + "x" * 120
said["native"] = [native.from_string(text("v")).render(v=v) for v in ("48213", "1e3", "None", odd, "x")]
said["plain"] = [native.from_string("{{ v }}").render(v=v) for v in ("48213", "1e3")]
for value in (None, "", "none", "@weekly"):
    if value is None:
        os.environ.pop("S", None)
    else:
        os.environ["S"] = value
    said.setdefault("schedule", []).append(schedule_from_env("S", "@daily"))
inv = os.path.join(os.getcwd(), "inv.yaml")
with open(inv, "w") as f:
    f.write("pairs: [{name: p, kind: redis, master: 'redis://127.0.0.1:1', replica: 'redis://127.0.0.1:2'}]")
out = os.path.join(os.getcwd(), "out")
report = ops.AuditReportOperator(task_id="r", inventory=inv, out_dir=out, run_id="r1", pairs=["nope"])
try:
    report.execute({})
except AirflowFailException as e:
    said["report"] = str(e)
os.environ["REPLICA_AUDIT_HISTORY"] = "mysql://hist:HistPw-Secret42@db:3306/h"
from replica_audit_provider.dags import data_quality_report_dag
said["history_default"] = data_quality_report_dag().params["history"]
os.environ["AIRFLOW_CONN_HIST"] = json.dumps(
    {"conn_type": "mysql", "host": "db", "port": 3307, "login": "h", "password": "p/w", "schema": "audit"}
)
os.environ["REPLICA_AUDIT_HISTORY"] = "conn:hist"
said["history_url"] = ops.history_url()
os.environ["REPLICA_AUDIT_HISTORY"] = "conn:no_such_history"
report2 = ops.AuditReportOperator(task_id="r2", inventory=inv, out_dir=out, run_id="r2", pairs=["p"])
try:
    report2.execute({})
except AirflowFailException as e:
    said["report2"] = str(e)
said["report2_history"] = json.load(open(os.path.join(out, "r2", "manifest.json"))).get("history")
from replica_audit_provider.dags import consistency_audit_dag
mine = consistency_audit_dag(dag_id="mine", params={"inventory": "/etc/mine.yaml"}, default_args={"owner": "dba"})
said["merged"] = {
    "params": sorted(mine.params), "inventory": mine.params["inventory"],
    "owner": mine.default_args["owner"], "retries": mine.default_args["retries"],
}
print(json.dumps(said))
"""


def test_operator_arguments_and_text_templates(tmp_path: Path) -> None:
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow")}
    said = script_said(SCRIPT, cwd=tmp_path, env=env, timeout=120)
    assert said["stages_match"]  # the operator's list is the pipeline's
    assert "stage 'snpashot': expected one of snapshot, diff, recheck, gate" in said["stage"]
    assert "days 'seven': expected a whole number" in said["days"]
    assert "run_id rendered as int 48213" in said["run_id"]
    assert said["plain"] == [48213, 1000.0]  # what native rendering does to text that looks like a number
    assert said["native"] == [
        "48213",
        "1e3",
        "None",
        "a'b" + chr(92) + chr(34) + "<c>é" + chr(0x1F600) + "x" * 120,
        "x",
    ]
    assert said["schedule"] == ["@daily", None, None, "@weekly"]
    assert said["report"].startswith("--pair nope")  # failed as a task, not a traceback
    assert not (tmp_path / "out" / "r1").exists()  # and nothing was started
    assert said["merged"] == {
        "params": ["inventory", "keep_days", "keep_last", "keep_snapshot_days", "out", "pairs"],
        "inventory": "/etc/mine.yaml",
        "owner": "dba",
        "retries": 2,
    }
    assert said["history_default"] == ""  # the worker reads $REPLICA_AUDIT_HISTORY; the DAG stores no URL
    assert said["history_url"] == "mysql://h:p%2Fw@db:3307/audit"  # conn:<id> read from Airflow's connections
    # a history that cannot be named does not decide the task: the pair's own verdict (not audited) does
    assert said["report2"].startswith("audit incomplete"), said["report2"]
    assert said["report2_history"]["status"] == "error" and "no_such_history" in said["report2_history"]["message"]
