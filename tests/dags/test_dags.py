"""The DAG files parse cleanly, and consistency_audit really runs (`airflow dags test`) against real Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from audit.local.redis_server import start_pair, wait_in_sync
from tests.conftest import REPO
from tests.integration.helpers import findings, latest_run, summary, write_inventory

pytestmark = pytest.mark.airflow
AIRFLOW = str(Path(sys.executable).parent / "airflow")


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("airflow-home")
    env = dict(os.environ, AIRFLOW_HOME=str(home), AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
               AIRFLOW__CORE__PLUGINS_FOLDER=str(REPO / "plugins"), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               GX_ANALYTICS_ENABLED="false")
    for args in (["db", "migrate"], ["dags", "reserialize"]):
        done = subprocess.run([AIRFLOW, *args], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return env


def test_dag_integrity(airflow_env: dict[str, str]) -> None:
    code = f"""
import json, sys
sys.path.insert(0, {str(REPO / 'plugins')!r})
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder={str(REPO / 'dags')!r})
print(json.dumps({{"errors": {{k: str(v) for k, v in bag.import_errors.items()}},
                  "dags": {{d.dag_id: {{"tags": sorted(d.tags), "retries": d.default_args.get("retries")}}
                           for d in bag.dags.values()}}}}))
"""
    done = subprocess.run([sys.executable, "-c", code], env=airflow_env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["errors"] == {}
    assert result["dags"]["consistency_audit"] == {"tags": ["consistency", "replica-audit"], "retries": 2}


def test_consistency_audit_dag_run_fails_on_divergence(airflow_env: dict[str, str], tmp_path: Path) -> None:
    master, replica = start_pair(tmp_path / "servers")
    try:
        c = master.client()
        c.mset({f"k{i}": i for i in range(3000)})
        wait_in_sync(master, replica)
        replica.client().config_set("replica-read-only", "no")
        replica.client().delete("k7")
        inv = write_inventory(tmp_path / "inv.yaml", [
            {"name": "dag-pair", "kind": "redis", "master": master.url, "replica": replica.url}])
        conf = json.dumps({"inventory": str(inv), "out": str(tmp_path / "out")})
        done = subprocess.run([AIRFLOW, "dags", "test", "consistency_audit", "-c", conf], env=airflow_env,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL)
    finally:
        replica.stop()
        master.stop()
    log = done.stdout + done.stderr
    assert done.returncode != 0, log[-3000:]  # the gate failed, so the run failed
    assert "gate failed: missing_on_replica=1" in log
    root = latest_run(tmp_path / "out")
    assert [(f["category"], f["key"]) for f in findings(root)] == [("missing_on_replica", b"k7")]
    assert summary(root)["pairs"][0]["status"] == "failed"
    assert (root / "report.html").exists()
