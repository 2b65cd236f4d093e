"""Retention in the `consistency_audit` DAG: its Params (defaults from REPLICA_AUDIT_KEEP_*; off when unset),
the `prune` task beside `report` (so `report` still decides the DAG run), and PruneOperator on real runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from audit.report.charts import format_bytes
from tests.dags.conftest import script_said
from tests.integration.helpers import run_cli
from tests.integration.test_own_kind import inventory, make_dirs
from tests.integration.test_prune import _age

SCRIPT = """
import json, os, sys
from structlog.testing import capture_logs
from airflow.sdk.exceptions import AirflowFailException
from replica_audit_provider import operators as ops
from replica_audit_provider.dags import consistency_audit_dag

out = sys.argv[1]
said = {}
for name, env in {"unset": {}, "set": {"REPLICA_AUDIT_KEEP_DAYS": "30", "REPLICA_AUDIT_KEEP_SNAPSHOT_DAYS": "7",
                                         "REPLICA_AUDIT_KEEP_LAST": "2"}}.items():
    for k in ("REPLICA_AUDIT_KEEP_DAYS", "REPLICA_AUDIT_KEEP_SNAPSHOT_DAYS", "REPLICA_AUDIT_KEEP_LAST"):
        os.environ.pop(k, None)
    os.environ.update(env)
    dag = consistency_audit_dag(dag_id="audit_" + name)
    said[name] = {k: dag.params[k] for k in ("keep_days", "keep_snapshot_days", "keep_last")}
prune, report = dag.task_dict["prune"], dag.task_dict["report"]
said["prune_upstream"] = sorted(prune.upstream_task_ids)
said["report_upstream"] = sorted(report.upstream_task_ids)
said["report_downstream"] = sorted(report.downstream_task_ids)
said["trigger_rule"] = prune.trigger_rule.value
said["off"] = ops.PruneOperator(task_id="p0", out_dir=out, keep_days=None, keep_snapshot_days="None").execute({})
try:
    ops.PruneOperator(task_id="p1", out_dir=out, keep_days="a month").execute({})
except AirflowFailException as e:
    said["bad"] = str(e)
try:
    ops.PruneOperator(task_id="p2", out_dir=out, keep_days=-1).execute({})
except AirflowFailException as e:
    said["negative"] = str(e)
with capture_logs() as logged:  # what the task's log says, as Airflow's structlog hands it on
    said["pruned"] = ops.PruneOperator(task_id="p3", out_dir=out, keep_days="30", keep_snapshot_days=7).execute({})
said["logged"] = [e["event"] % tuple(e.get("positional_args", ())) for e in logged]
print(json.dumps(said))
"""


def test_the_dag_prunes_beside_the_report_with_its_params(dirfiles_kind, tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("REPLICA_AUDIT_HISTORY", raising=False)
    master, replica = make_dirs(tmp_path)
    inv = inventory(tmp_path / "inv.yaml", master, replica)
    out = tmp_path / "out"
    for run_id, days in (("old", 40), ("mid", 10), ("new", 0)):
        assert run_cli(["run", "-i", str(inv), "-o", str(out), "--run-id", run_id, "-q"], monkeypatch) == 0
        _age(out, run_id, days)
    for run_id, days in (("v-old", 40), ("v-new", 35)):  # where post_migration_verification writes by default
        verifications = out / "verifications"
        assert run_cli(["run", "-i", str(inv), "-o", str(verifications), "--run-id", run_id, "-q"], monkeypatch) == 0
        _age(verifications, run_id, days)
    args = ["prune", "-o", str(out), "--keep-days", "30", "--keep-snapshot-days", "7", "--dry-run"]
    assert run_cli(args, monkeypatch) == 0
    would = capsys.readouterr().out
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow")}
    said = script_said(SCRIPT, str(out), cwd=tmp_path, env=env, timeout=300)
    assert said["unset"] == {"keep_days": None, "keep_snapshot_days": None, "keep_last": 1}  # off by default
    assert said["set"] == {"keep_days": 30.0, "keep_snapshot_days": 7.0, "keep_last": 2}
    assert said["prune_upstream"] == said["report_upstream"] == ["audit_pair.verdict"]
    assert said["report_downstream"] == [] and said["trigger_rule"] == "all_done"
    assert said["off"] == {"deleted": [], "trimmed": [], "freed_bytes": 0}
    assert "keep_days rendered as 'a month'" in said["bad"] and "--keep-days -1.0" in said["negative"]
    assert said["pruned"]["deleted"] == ["old", "verifications/v-old"] and said["pruned"]["trimmed"] == ["mid"]
    assert said["pruned"]["freed_bytes"] > 0
    # the task's log says what `replica-audit prune` prints, sentence for sentence (sizes as the reports write them)
    printed = " ".join(would.replace("would delete", "deleted").replace("would free", "freed").split())
    logged = [" ".join(line.split()) for line in said["logged"] if line.startswith(("deleted ", "freed "))]
    assert [line.rsplit(" (", 1)[0] for line in logged[:-1]] == [
        "deleted run old",
        "deleted snapshots and work files of run mid",
        "deleted run verifications/v-old",
    ]
    assert all(line in printed for line in logged), (logged, printed)
    total = said["pruned"]["freed_bytes"]
    assert logged[-1] == f"freed {format_bytes(total)} ({total} bytes) in {out}"
    assert (
        not (out / "old").exists() and not (out / "mid" / "snapshots").exists() and (out / "new" / "snapshots").is_dir()
    )
    assert not (out / "verifications" / "v-old").exists() and (out / "verifications" / "v-new" / "snapshots").is_dir()


@pytest.mark.airflow
def test_a_dag_run_prunes_an_old_run_and_still_fails_on_its_failed_gate(  # type: ignore[no-untyped-def]
    airflow_env: dict[str, str], dirfiles_kind, tmp_path: Path, monkeypatch
) -> None:
    from tests.dags.test_dags import dags_test
    from tests.integration.test_own_kind import REGISTRY_ENTRY

    monkeypatch.delenv("REPLICA_AUDIT_HISTORY", raising=False)
    master, replica = make_dirs(tmp_path)
    inv = inventory(tmp_path / "inv.yaml", master, replica)
    out = tmp_path / "out"
    for run_id, days in (("two-months", 60), ("last-month", 30)):
        assert run_cli(["run", "-i", str(inv), "-o", str(out), "--run-id", run_id, "-q"], monkeypatch) == 0
        _age(out, run_id, days)
    (replica / "same.txt").write_bytes(b"changed")
    path = tmp_path / "kinds-path"  # `tests` importable by the installed Airflow, as test_dags.py does it
    path.mkdir()
    (path / "tests").symlink_to(Path(__file__).parents[2] / "tests", target_is_directory=True)
    env = dict(airflow_env, REPLICA_AUDIT_KINDS=REGISTRY_ENTRY, PYTHONPATH=str(path))
    done = dags_test(env, "consistency_audit", {"inventory": str(inv), "out": str(out), "keep_days": 7})
    assert done.returncode != 0, (done.stdout + done.stderr)[-3000:]  # the gate failed: so did the run
    # the oldest run is deleted whichever of prune and report ends first (last-month is deleted too only
    # when this run had ended by then); this run is kept
    assert not (out / "two-months").exists(), (done.stdout + done.stderr)[-6000:]
    [this] = [p.parent for p in out.glob("*/manifest.json") if p.parent.name != "last-month"]
    assert json.loads((this / "summary.json").read_text())["pairs"][0]["status"] == "failed"
