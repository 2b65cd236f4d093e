"""audit/cli/interrupt.py: Ctrl-C and SIGTERM in the middle of a `run`, on the real command in its own
process: exit 128 + the signal, one line naming the run and how to go on, no traceback, no snapshot
process left reading the servers, and `--resume` goes on from the checkpoints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from audit.local.redis_server import start_pair, wait_in_sync
from tests.conftest import REPO
from tests.integration.helpers import write_inventory

pytestmark = pytest.mark.integration
KEYS = 12_000


def _sigint_as_in_a_terminal() -> None:
    """A test runner's worker may ignore SIGINT, and a child inherits that: the command would never see it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(ready, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.time() + timeout_s
    while not ready():
        assert time.time() < deadline, what
        time.sleep(0.1)


@pytest.mark.parametrize(
    ("signum", "whole_group", "processes"),
    [
        (signal.SIGTERM, False, True),  # `kill PID` (systemd, a scheduler)
        (signal.SIGINT, True, True),  # a terminal's Ctrl-C
        (signal.SIGINT, True, False),  # `snapshot_processes: false`: a thread per side, which cannot be killed
    ],
)
def test_an_interrupted_run_says_how_to_go_on_and_leaves_nothing_running(
    signum: signal.Signals, whole_group: bool, processes: bool, tmp_path: Path
) -> None:
    master, replica = start_pair(tmp_path / "servers")
    try:
        master.client().mset({f"k:{i:06d}": b"v" * 40 for i in range(KEYS)})
        wait_in_sync(master, replica)
        # about twelve seconds a side: a side spawned late under load must not finish before the other starts
        slow = {"max_keys_per_s": 1000, "max_latency_ms": None, "snapshot_processes": processes}
        pair = {"name": "p", "kind": "redis", "master": master.url, "replica": replica.url, "dbs": [0]}
        inv = write_inventory(tmp_path / "inv.yaml", [pair], **slow)
        out = tmp_path / "out"
        args = ["-i", str(inv), "-o", str(out)]
        command = [sys.executable, "-m", "audit", "run", *args, "--run-id", "r1"]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        err_file = tmp_path / "stderr"
        with err_file.open("wb") as err:  # a file: the JVM holds it a moment after the command's end
            proc = subprocess.Popen(
                command,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
                preexec_fn=_sigint_as_in_a_terminal,
            )
        checkpoints = [out / "r1" / "snapshots" / "p" / side / "checkpoint.json" for side in ("master", "replica")]
        _wait_for(lambda: all(c.exists() for c in checkpoints), 90, "no checkpoint before the interrupt")
        readers = [c for c in psutil.Process(proc.pid).children() if "multiprocessing.spawn" in " ".join(c.cmdline())]
        assert len(readers) == (2 if processes else 0)
        (os.killpg if whole_group else os.kill)(proc.pid, signum)
        proc.wait(timeout=60)
        text = err_file.read_text()
        assert proc.returncode == 128 + signum, text
        assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
        assert f"interrupted ({signum.name}): run r1 is kept" in text and "--resume r1" in text
        _, alive = psutil.wait_procs(readers, timeout=5)
        assert alive == [], "a snapshot process went on reading the servers"
        # the sides stopped where they were: a thread used to read its whole keyspace before the command could end
        assert not any(json.loads(c.read_text())["complete"] for c in checkpoints)

        again = subprocess.run(
            [sys.executable, "-m", "audit", "run", *args, "--resume", "r1", "--json"], env=env, capture_output=True
        )
        assert again.returncode == 0, again.stderr.decode()
        assert json.loads(again.stdout)["pairs"][0]["coverage"]["keys_compared"] == KEYS
        metas = [json.loads((c.parent / "snapshot.json").read_text()) for c in checkpoints]
        assert any(m["resumed_from"] for m in metas)  # what was read before the interrupt was kept
    finally:
        replica.stop()
        master.stop()
