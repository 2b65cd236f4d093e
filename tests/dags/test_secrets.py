"""No secret anywhere: passwords given in the inventory and in Airflow connections never reach an output.

A consistency_audit run through real Airflow on two pairs that need passwords (one written in the
inventory's URL, one kept in an Airflow connection referenced as conn:<id>), then every byte the run
left is searched: stdout and stderr, the output directory (summary.json, the manifest, Parquet files,
report.html, the GX context and Data Docs, the history store) and the Airflow home (task logs, and the
metadata database with XCom, asset events and rendered fields).
"""

from __future__ import annotations

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
        conn = {
            "conn_type": "replica_audit_redis",
            "host": "127.0.0.1",
            "port": replica.port,
            "login": "conn",
            "password": CONNECTION_SECRET,
        }
        env = dict(airflow_env, AIRFLOW_CONN_SECRET_REPLICA=json.dumps(conn))
        url = f"redis://inv:{INVENTORY_SECRET}@127.0.0.1:{master.port}"
        inv = write_inventory(
            tmp_path / "inv.yaml",
            [{"name": "with-secrets", "kind": "redis", "master": url, "replica": "conn:secret_replica"}],
        )
        done = dags_test(env, "consistency_audit", {"inventory": str(inv), "out": str(tmp_path / "out")})
    finally:
        replica.stop()
        master.stop()
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    root = latest_run(tmp_path / "out")
    assert summary(root)["pairs"][0]["status"] == "passed"  # both secrets worked
    home = Path(airflow_env["AIRFLOW_HOME"])
    assert "audit_pair.snapshot" in done.stdout + done.stderr  # `dags test` writes the task logs to its output
    for secret in (INVENTORY_SECRET, CONNECTION_SECRET, quote(CONNECTION_SECRET, safe="")):
        assert secret not in done.stdout + done.stderr
        for where in (tmp_path / "out", home):
            assert files_holding(where, secret.encode()) == [], secret
