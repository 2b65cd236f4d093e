"""`make demo`: a local Redis pair with planted divergences, audited through the real Airflow DAG.

Starts redis-server master + replica on loopback, loads ~100k keys of every type plus a 200k-field
hash, plants six divergences on the replica, attaches `redis-cli --replica` (SYNC, never acks), runs
`airflow dags test consistency_audit` against a private AIRFLOW_HOME, prints the summary and checks
that exactly the planted divergences were found and the SYNC client was diagnosed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / ".demo"
sys.path.insert(0, str(REPO))

from audit.local.redis_server import free_port, start_pair, wait_in_sync  # noqa: E402
from audit.local.sample import load_sample, plant_divergences  # noqa: E402


def airflow_env(home: Path) -> dict[str, str]:
    return dict(
        os.environ,
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__LOGGING__LOGGING_LEVEL="WARNING",
        GX_ANALYTICS_ENABLED="false",
    )


def airflow(env: dict[str, str], *args: str, log: Path) -> int:
    with log.open("a") as f:
        return subprocess.run(
            [str(Path(sys.executable).parent / "airflow"), *args],
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        ).returncode


def main() -> int:
    shutil.rmtree(DEMO / "servers", ignore_errors=True)
    DEMO.mkdir(exist_ok=True)
    print("demo: starting redis-server master and replica on loopback")
    master, replica = start_pair(DEMO / "servers", free_port(), free_port())
    sync_client = None
    try:
        print("demo: loading ~100k keys (every type, TTLs, binary keys) and a 200k-field hash")
        load_sample(master.client())
        wait_in_sync(master, replica)
        planted = plant_divergences(replica.client())
        print(f"demo: planted {len(planted)} divergences on the replica:")
        for p in planted:
            print(f"        {p.category:20} {p.key!r}")
        sync_client = subprocess.Popen(
            ["redis-cli", "-p", str(master.port), "--replica"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(1)
        inventory = DEMO / "inventory.yaml"
        inventory.write_text(f"""# written by scripts/demo.py
defaults: {{recheck_rounds: 3, recheck_interval_s: 1}}
pairs:
  - name: demo-cache
    kind: redis
    master: {master.url}
    replica: {replica.url}
    gate: {{max_missing: 0, max_value_mismatch: 0, max_lag_bytes: 10485760}}
""")
        out = DEMO / "out"
        env = airflow_env(DEMO / "airflow")
        log = DEMO / "airflow.log"
        log.write_text("")
        print(f"demo: running the Airflow DAG consistency_audit (airflow dags test; log: {log})")
        airflow(env, "db", "migrate", log=log)
        airflow(env, "dags", "reserialize", log=log)
        started = time.time()
        rc = airflow(
            env,
            "dags",
            "test",
            "consistency_audit",
            "-c",
            json.dumps({"inventory": str(inventory), "out": str(out)}),
            log=log,
        )
        print(
            f"demo: DAG run finished in {time.time() - started:.0f}s ({'failed' if rc else 'succeeded'}, "
            "as a run must when the gate fails)"
        )
        run_root = max((p.parent for p in out.glob("*/summary.json")), key=lambda p: p.stat().st_mtime)
        subprocess.run(
            [
                str(Path(sys.executable).parent / "replica-audit"),
                "report",
                "-i",
                str(inventory),
                "-o",
                str(out),
                "--run-id",
                run_root.name,
            ],
            stdin=subprocess.DEVNULL,
        )
        return check(json.loads((run_root / "summary.json").read_text()), planted)
    finally:
        if sync_client is not None:
            sync_client.terminate()
        replica.stop()
        master.stop()


def check(summary: dict[str, object], planted: list) -> int:  # type: ignore[type-arg]
    import pyarrow.dataset as ds

    pair = summary["pairs"][0]  # type: ignore[index]
    root = DEMO / "out" / str(summary["run_id"])
    found = ds.dataset(root / "findings.parquet", format="parquet").to_table().to_pylist()
    got = {(f["category"], f["key"]) for f in found if f["check"] == "keyspace"}
    want = {(p.category, p.key) for p in planted}
    diagnosed = [f for f in found if f["diagnosis"] == "REDIS_SYNC_NO_ACK"]
    ok = got == want and diagnosed and pair["status"] == "failed"
    print(
        f"demo: planted {len(want)}, found {len(got & want)}, extra findings {sorted(got - want)}, "
        f"missed {sorted(want - got)}; SYNC client diagnosed REDIS_SYNC_NO_ACK: {bool(diagnosed)}; "
        f"gate: {pair['status']}"
    )
    print("demo: OK" if ok else "demo: MISMATCH (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
