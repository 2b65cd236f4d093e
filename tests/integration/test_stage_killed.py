"""A stage killed midway on a run that was audited before (an Airflow task cleared and run again for the
same run, a retry): its pair reads as unfinished, never with the earlier attempt's passing verdict.

The stage runs in a process of its own and hangs on a FIFO, as on a source that stopped answering; the
test kills it with SIGKILL, as a lost worker or Airflow's task kill ends a task, so nothing in the stage
gets to record what happened. The tests' own kind (tests/kinds/dirfiles.py) needs no server nor Spark.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from audit import finish_run, load_inventory, run_stage, start_run
from audit.inventory import Inventory
from audit.layout import RunDir
from audit.pipeline import STAGES
from audit.report.summary import pair_verdict
from tests.conftest import REPO
from tests.integration.test_own_kind import inventory, make_dirs

STAGE = """
import sys
from pathlib import Path
from audit import load_inventory, run_stage, start_run
inv = load_inventory(sys.argv[1])
run_stage(sys.argv[4], inv.pair("assets"), start_run(inv, Path(sys.argv[2]), sys.argv[3]))
"""


def _kill_once_inside(proc: subprocess.Popen[bytes], fifo: Path) -> None:
    """SIGKILL `proc` once it has opened `fifo` for reading (so it is inside the stage, blocked)."""
    deadline = time.monotonic() + 120  # a stage that never gets there fails the test instead of hanging it
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as e:
            if e.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
        assert proc.poll() is None, f"the stage ended before reaching {fifo}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"the stage never opened {fifo}"
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    os.close(fd)


def _audited(tmp_path: Path, master: Path, replica: Path) -> tuple[Path, Inventory, RunDir]:
    """Every stage of the dirfiles pair run once, in a run named as Airflow names one."""
    inv_path = inventory(tmp_path / "inv.yaml", master, replica)
    inv = load_inventory(str(inv_path))
    run = start_run(inv, tmp_path / "out", "manual__2026-11-25T10_00_00_00_00")
    for s in STAGES:
        run_stage(s, inv.pair("assets"), run)
    return inv_path, inv, run


def _kill_inside(stage: str, fifo: Path, inv_path: Path, run: RunDir) -> None:
    """Run `stage` again on `run` in a process of its own, blocked on `fifo`, and SIGKILL it there."""
    os.mkfifo(fifo)
    args = [sys.executable, "-c", STAGE, str(inv_path), str(run.out), run.run_id, stage]
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _kill_once_inside(proc, fifo)


@pytest.mark.parametrize("stage", ["snapshot", "diff"])
def test_a_stage_killed_midway_leaves_its_pair_unfinished_not_passed(
    dirfiles_kind: None, tmp_path: Path, stage: str
) -> None:
    master, replica = make_dirs(tmp_path)
    inv_path, inv, run = _audited(tmp_path, master, replica)
    assert pair_verdict(run, "assets")["status"] == "passed"

    # the same run again (the DAG run cleared); this time the stage hangs and is killed
    if stage == "snapshot":
        fifo = master / "hangs"  # the master's files are read in the snapshot
    else:
        fifo = run.snapshot("assets", "master") / "files.json"  # the diff reads the snapshot's listing
        fifo.unlink()
    _kill_inside(stage, fifo, inv_path, run)

    verdict = pair_verdict(run, "assets")
    assert verdict["status"] == "incomplete", verdict  # was "passed": the earlier attempt's gate
    fifo.unlink()
    summary = finish_run(inv, run, inv.pairs)
    assert summary["exit_code"] != 0 and summary["pairs"][0]["status"] != "passed", summary["pairs"]


def test_a_diff_killed_midway_leaves_no_findings_of_the_earlier_attempt(dirfiles_kind: None, tmp_path: Path) -> None:
    master, replica = make_dirs(tmp_path)
    (replica / "same.txt").write_bytes(b"changed")
    inv_path, inv, run = _audited(tmp_path, master, replica)
    assert pair_verdict(run, "assets")["status"] == "failed"
    assert run.findings_file("assets").exists() and run.metrics_file("assets").exists()

    fifo = run.snapshot("assets", "master") / "files.json"
    fifo.unlink()
    _kill_inside("diff", fifo, inv_path, run)

    # the earlier attempt's findings and metrics are gone with its verdict: a report now would list them
    # beside a pair that reads unfinished
    assert not run.findings_file("assets").exists()
    assert not run.metrics_file("assets").exists()
    fifo.unlink()
    summary = finish_run(inv, run, inv.pairs)
    (pair,) = summary["pairs"]
    assert pair["status"] == "incomplete" and pair["findings_sample"] == {} and pair["diagnoses"] == {}, pair
