"""A DAG run run again for the same logical date (cleared, or `airflow dags test` twice) works in the same
run directory: when its snapshot is stopped midway (here its execution_timeout, on a source that hangs),
the pair is `incomplete` and the run fails; the earlier run's pass is never published again."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.dags.test_dags import asset_events
from tests.integration.helpers import summary
from tests.integration.test_own_kind import REGISTRY_ENTRY, inventory, make_dirs

pytestmark = pytest.mark.airflow
DAG_FILE = '''"""Airflow DAG file: consistency_audit whose snapshot has an execution_timeout (a dag of a test)."""
from datetime import timedelta

from replica_audit_provider.dags import consistency_audit_dag

dag = consistency_audit_dag(dag_id="audit_with_timeout", schedule=None)
dag.task_dict["audit_pair.snapshot"].execution_timeout = timedelta(seconds=30)
dag.task_dict["audit_pair.snapshot"].retries = 0
'''
RUN = """
import json, sys
from datetime import datetime, timezone
from airflow.dag_processing.dagbag import DagBag
dag = DagBag(dag_folder=sys.argv[1]).dags["audit_with_timeout"]
when = datetime(2031, 1, 2, tzinfo=timezone.utc)  # the same run each time: dag.test clears it and runs it again
run = dag.test(run_after=when, logical_date=when, run_conf=json.loads(sys.argv[2]))
print(json.dumps({"state": str(run.state), "run_id": run.run_id}))
"""
RUN_DIR = "manual__2031-01-02T00_00_00_00_00"  # Airflow's run id, as the operators name its directory


def _run_dag(env: dict[str, str], dags: Path, conf: dict[str, Any]) -> tuple[str, str]:
    """The DAG run (state, and the end of what it logged), run again if it exists."""
    done = subprocess.run(
        [env["AIRFLOW_PYTHON"], "-c", RUN, str(dags), json.dumps(conf)],
        env=env,
        cwd=env["AIRFLOW_HOME"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-6000:]
    run = json.loads(done.stdout.strip().splitlines()[-1])
    assert run["run_id"] == "manual__2031-01-02T00:00:00+00:00", run
    return run["state"], said


def test_a_run_again_whose_snapshot_times_out_fails_instead_of_passing_again(
    airflow_env: dict[str, str], tmp_path: Path
) -> None:
    master, replica = make_dirs(tmp_path)
    inv = inventory(tmp_path / "inv.yaml", master, replica)
    out = tmp_path / "out"
    path = tmp_path / "kinds-path"  # `tests` importable by the installed Airflow, as test_dags.py does it
    path.mkdir()
    (path / "tests").symlink_to(REPO / "tests", target_is_directory=True)
    dags = tmp_path / "dags"  # a DAGs folder of its own: the session's holds the repository's DAGs only
    dags.mkdir()
    (dags / "audit_with_timeout.py").write_text(DAG_FILE)
    env = dict(airflow_env, REPLICA_AUDIT_KINDS=REGISTRY_ENTRY, PYTHONPATH=str(path))
    env.update(AIRFLOW__CORE__DAGS_FOLDER=str(dags))
    env.pop("REPLICA_AUDIT_HISTORY", None)
    conf = {"inventory": str(inv), "out": str(out)}

    state, said = _run_dag(env, dags, conf)
    assert state == "success", said[-6000:]
    assert summary(out / RUN_DIR)["pairs"][0]["status"] == "passed"

    os.mkfifo(master / "hangs")  # the snapshot blocks reading it, until its execution_timeout
    state, said = _run_dag(env, dags, conf)
    assert state == "failed", said[-6000:]  # it succeeded: the first attempt's verdict, read again
    assert "AirflowTaskTimeout" in said and "audit incomplete: {'assets': 'incomplete'}" in said, said[-6000:]
    assert summary(out / RUN_DIR)["pairs"][0]["status"] == "incomplete"
    events = [extra for uri, extra, _ in asset_events(env) if uri == "replica-audit://assets"]
    mine = [e for e in events if e["run_id"] == RUN_DIR]
    assert [e["status"] for e in mine] == ["passed", "incomplete"], mine
