"""`scripts/standalone.sh` really starts Airflow with the project's DAGs: health endpoint, login, DAG list.

Takes 10-30 s on 2 cores. Every port is a free one, so it can run next to another Airflow.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from audit.local.redis_server import free_port
from tests.conftest import REPO

pytestmark = pytest.mark.airflow
STARTUP_S = 180


def _get(url: str, token: str | None = None, body: dict[str, Any] | None = None) -> Any:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    data = json.dumps(body).encode() if body is not None else None
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=10) as r:
        return json.loads(r.read())


def _until(check: Any, what: str, proc: subprocess.Popen[bytes], log: Path) -> Any:
    deadline = time.time() + STARTUP_S
    while time.time() < deadline:
        assert proc.poll() is None, f"standalone exited ({proc.returncode}):\n{log.read_text()[-3000:]}"
        try:
            result = check()
            if result:
                return result
        except (OSError, urllib.error.URLError, ValueError, KeyError):
            pass
        time.sleep(1)
    raise AssertionError(f"{what} not within {STARTUP_S} s:\n{log.read_text()[-3000:]}")


def test_standalone_serves_the_dags(tmp_path: Path) -> None:
    port = free_port()
    home = tmp_path / "airflow"
    env = dict(
        os.environ,
        AIRFLOW_HOME=str(home),
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(free_port()),
        AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(free_port()),
    )
    log = tmp_path / "standalone.log"
    base = f"http://127.0.0.1:{port}"
    started = time.time()
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            ["bash", str(REPO / "scripts" / "standalone.sh")],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        health = _until(lambda: _get(f"{base}/api/v2/monitor/health"), "health", proc, log)
        healthy_s = time.time() - started
        assert health["metadatabase"]["status"] == "healthy"
        _until(
            lambda: _get(f"{base}/api/v2/monitor/health")["scheduler"]["status"] == "healthy", "scheduler", proc, log
        )
        password = json.loads((home / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
        token = _get(f"{base}/auth/token", body={"username": "admin", "password": password})["access_token"]
        dags = _until(
            lambda: (d := _get(f"{base}/api/v2/dags", token)["dags"]) and len(d) == 3 and d, "the three DAGs", proc, log
        )
        assert {d["dag_id"]: d["is_paused"] for d in dags} == {
            "consistency_audit": True,
            "data_quality_report": True,
            "post_migration_verification": True,
        }
        assert _get(f"{base}/api/v2/importErrors", token)["total_entries"] == 0
        assert (home / "out").is_dir()  # REPLICA_AUDIT_OUT defaults inside AIRFLOW_HOME
        print(f"standalone healthy after {healthy_s:.1f} s")
    finally:
        stop_group(proc)


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the whole process group (api-server, scheduler, ...), SIGKILL to whatever is left after 30 s."""
    os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.time() + 30
    while time.time() < deadline:
        proc.poll()
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
