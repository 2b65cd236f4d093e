"""No secret anywhere: passwords given in the inventory and in Airflow connections never reach an output.

A consistency_audit run through real Airflow on pairs that need passwords (one written in the
inventory's URL, one kept in an Airflow connection referenced as conn:<id> in JSON form, a wrong one in
a connection in URL form), with a divergence planted so the gate fails, then every byte the run left is
searched, for each password plain, percent-encoded and base64: stdout and stderr, the output directory
(summary.json, the manifest, Parquet files, report.html, the GX context and Data Docs, the history
store) and the Airflow home (task logs, and the metadata database with XCom, asset events and rendered
fields). The failures are where a URL is most tempting to print: the pair that cannot log in, the gate.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from urllib.parse import quote

import pytest

from audit.local.redis_server import start_pair, wait_in_sync
from tests.dags.test_dags import dags_test
from tests.integration.helpers import latest_run, summary, write_inventory

pytestmark = pytest.mark.airflow
INVENTORY_SECRET = "Inv-S3cret-in-url"
CONNECTION_SECRET = "Conn:S3cret@with/odd"
WRONG_SECRET = "Wr0ng:S3cret@with/odd"


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
        done = dags_test(env, "consistency_audit", {"inventory": str(inv), "out": str(tmp_path / "out")})
    finally:
        replica.stop()
        master.stop()
    said = done.stdout + done.stderr
    assert done.returncode != 0, said[-3000:]
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
