"""The operators take `out_dir` as the CLI takes --out: a local path, a URI refused with the reason."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.dags.conftest import script_said

SCRIPT = """
import json, sys
from airflow.sdk.exceptions import AirflowFailException
from replica_audit_provider import operators as ops

inv, out = sys.argv[1], sys.argv[2]
made = {
    "stage": ops.AuditStageOperator(task_id="s", stage="snapshot", pair="p", inventory=inv, out_dir=out, run_id="r"),
    "verdict": ops.PairVerdictOperator(task_id="v", pair="p", out_dir=out, run_id="r"),
    "report": ops.AuditReportOperator(task_id="r", inventory=inv, out_dir=out, run_id="r"),
    "daily": ops.DailyReportOperator(task_id="d", out_dir=out),
}
said = {}
for name, op in made.items():
    try:
        op.execute({"outlet_events": {}})
        said[name] = "no error"
    except AirflowFailException as e:
        said[name] = str(e)
print(json.dumps(said))
"""


def test_an_out_uri_fails_each_operator_with_the_reason_and_writes_nothing(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    pair = {
        "name": "p",
        "kind": "redis",
        "master": {"url": "redis://127.0.0.1:1"},
        "replica": {"url": "redis://127.0.0.1:2"},
    }
    inv.write_text(json.dumps({"pairs": [pair]}))
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"), "REPLICA_AUDIT_HISTORY": ""}
    said = script_said(SCRIPT, str(inv), "s3a://bucket/out", cwd=tmp_path, env=env, timeout=120)
    for name, message in said.items():
        assert "s3a://bucket/out" in message and "local path" in message, (name, message)
    assert not (tmp_path / "s3a:").exists()
