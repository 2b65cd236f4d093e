"""No secret anywhere: passwords given in the inventory and in Airflow connections never reach an output.

A consistency_audit run through real Airflow on pairs that need passwords (one written in the
inventory's URL, one kept in an Airflow connection referenced as conn:<id> in JSON form, a wrong one in
a connection in URL form), with a divergence planted so the gate fails, then every byte the run left is
searched, for each password plain, percent-encoded and base64: stdout and stderr, the output directory
(summary.json, the manifest, Parquet files, report.html, the GX context and Data Docs, the history
store) and the Airflow home (task logs, and the metadata database with XCom, asset events and rendered
fields). The failures are where a URL is most tempting to print: the pair that cannot log in, the gate.

The DAG is consistency_audit made by its factory with the retry delays cut to a second (a DAG file of
the test's own, the documented `default_args` override): the pair that cannot log in is still retried
twice, each attempt logged, without waiting out the real delays (30-60 s, then 60-120 s).
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest

from audit.local.redis_server import start_pair, wait_in_sync
from tests.integration.helpers import latest_run, summary, write_inventory

pytestmark = pytest.mark.airflow
INVENTORY_SECRET = "Inv-S3cret-in-url"
CONNECTION_SECRET = "Conn:S3cret@with/odd"
WRONG_SECRET = "Wr0ng:S3cret@with/odd"
DAG_FILE = '''"""Airflow DAG file: consistency_audit retrying after a second (a dag of a test)."""
from datetime import timedelta

from replica_audit_provider.dags import consistency_audit_dag

quick = {"retry_delay": timedelta(seconds=1), "max_retry_delay": timedelta(seconds=2)}
dag = consistency_audit_dag(dag_id="audit_retrying_quickly", schedule=None, default_args=quick)
'''
RUN = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
dag = DagBag(dag_folder=sys.argv[1]).dags["audit_retrying_quickly"]
assert dag.default_args["retries"] == 2 and dag.default_args["retry_policy"] is not None
run = dag.test(run_conf=json.loads(sys.argv[2]))
print("DAG RUN STATE", run.state, flush=True)
"""


def run_dag(env: dict[str, str], dags: Path, conf: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The DAG of DAG_FILE run as `airflow dags test` runs one: in this process, task logs on stdout."""
    (dags / "audit_retrying_quickly.py").write_text(DAG_FILE)
    return subprocess.run(
        [env["AIRFLOW_PYTHON"], "-c", RUN, str(dags), json.dumps(conf)],
        env=dict(env, AIRFLOW__CORE__DAGS_FOLDER=str(dags)),
        cwd=env["AIRFLOW_HOME"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )


def files_holding(root: Path, secret: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and secret in p.read_bytes()]


def test_passwords_never_reach_any_output(airflow_env: dict[str, str], tmp_path: Path) -> None:
    master, replica = start_pair(tmp_path / "servers")
    try:
        for s in (master, replica):
            c = s.client()
            for user, secret in (("inv", INVENTORY_SECRET), ("conn", CONNECTION_SECRET)):
                c.execute_command(
                    "ACL", "SETUSER", user, "on", f">{secret}", "+@read", "+info", "+client|list", "+select", "allkeys"
                )
        master.client().mset({f"k{i}": i for i in range(500)})
        wait_in_sync(master, replica)
        r = replica.client()
        r.config_set("replica-read-only", "no")
        r.set("k7", "diverged")  # the gate fails: its failure is logged and stored too
        conn = {
            "conn_type": "replica_audit_redis",
            "host": "127.0.0.1",
            "port": replica.port,
            "login": "conn",
            "password": CONNECTION_SECRET,
        }
        wrong = f"redis://conn:{quote(WRONG_SECRET, safe='')}@127.0.0.1:{master.port}"  # Airflow's URL form
        env = dict(airflow_env, AIRFLOW_CONN_SECRET_REPLICA=json.dumps(conn), AIRFLOW_CONN_WRONG_MASTER=wrong)
        url = f"redis://inv:{INVENTORY_SECRET}@127.0.0.1:{master.port}"
        inv = write_inventory(
            tmp_path / "inv.yaml",
            [
                {"name": "with-secrets", "kind": "redis", "master": url, "replica": "conn:secret_replica"},
                {"name": "wrong-password", "kind": "redis", "master": "conn:wrong_master", "replica": url},
            ],
        )
        dags = tmp_path / "dags"  # a DAGs folder of its own: the session's holds the repository's DAGs only
        dags.mkdir()
        done = run_dag(env, dags, {"inventory": str(inv), "out": str(tmp_path / "out")})
    finally:
        replica.stop()
        master.stop()
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-3000:]
    assert "DAG RUN STATE failed" in done.stdout, said[-3000:]
    # the pair that cannot log in: tried three times (retries 2), the policy asked after each attempt
    assert said.count("action=retry") == 3, said[-6000:]
    root = latest_run(tmp_path / "out")
    pairs = {p["pair"]: p for p in summary(root)["pairs"]}
    assert pairs["with-secrets"]["status"] == "failed", pairs  # both secrets worked: audited, the gate failed
    assert pairs["wrong-password"]["status"] == "error", pairs
    assert "authentication failed" in said and f"redis://conn:***@127.0.0.1:{master.port}" in said
    home = Path(airflow_env["AIRFLOW_HOME"])
    assert "audit_pair.snapshot" in said  # `dags test` writes the task logs to its output
    secrets = [INVENTORY_SECRET, CONNECTION_SECRET, WRONG_SECRET]
    encoded = [quote(s, safe="") for s in secrets] + [base64.b64encode(s.encode()).decode() for s in secrets]
    for secret in secrets + encoded:
        assert secret not in said, secret
        for where in (tmp_path / "out", home):
            assert files_holding(where, secret.encode()) == [], secret
