"""Audits that overlap, as scheduled ones do: two commands given one run id at once, a stage started on a
pair whose stage still runs. Neither may mix its results with the other's.

The tests' own kind (tests/kinds/dirfiles.py) needs no server nor Spark; the other command is a real
`replica-audit` process.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import audit.cli.main as cli
from audit.layout import RunDir
from audit.report.summary import pair_verdict
from tests.conftest import REPO
from tests.integration.helpers import run_cli
from tests.integration.test_own_kind import inventory, make_dirs

CLI = [sys.executable, "-c", "from audit.cli.main import console; console()"]


def _cli(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """`replica-audit ARGS` in a process of its own."""
    return subprocess.run([*CLI, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout_s)


def test_two_runs_given_one_run_id_at_once_never_share_its_directory(
    dirfiles_kind: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    master, replica = make_dirs(tmp_path)
    inv = inventory(tmp_path / "inv.yaml", master, replica)
    out = tmp_path / "out"
    setup = cli._setup

    def another_run_gets_in_first(*args, **kwargs):  # type: ignore[no-untyped-def]
        # this command checked that run `daily` does not exist; another one starts it now, as a second
        # cron entry or a hand-started run would, and completes it
        other = _cli("run", "-i", str(inv), "-o", str(out), "--run-id", "daily", "--quiet")
        assert other.returncode == 0, other.stderr
        return setup(*args, **kwargs)

    monkeypatch.setattr(cli, "_setup", another_run_gets_in_first)
    manifest = out / "daily" / "manifest.json"
    code = run_cli(["run", "-i", str(inv), "-o", str(out), "--run-id", "daily", "--quiet"], monkeypatch)

    # it went on in the other run's directory: exit 0, one run's files holding two audits
    said = capsys.readouterr().err
    assert code == 2, said
    assert "--run-id daily: a run of that id is already in" in said
    assert json.loads(manifest.read_text())["stages_started"] == 4  # the other run's four stages only


@pytest.mark.parametrize("command", ["run", "snapshot"])
def test_a_drawn_run_id_another_command_drew_too_is_drawn_again(
    command: str,
    dirfiles_kind: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two commands started in the same second may draw one run id (its 4 hex digits alike): the second
    refused it, naming a --run-id never given (`run`), or went on in the first's directory (`snapshot`)."""
    import audit.pipeline

    master, replica = make_dirs(tmp_path)
    inv = inventory(tmp_path / "inv.yaml", master, replica)
    out = tmp_path / "out"
    first = _cli("run", "-i", str(inv), "-o", str(out), "--run-id", "20310102T000000Z-abcd", "--quiet")
    assert first.returncode == 0, first.stderr
    before = (out / "20310102T000000Z-abcd" / "manifest.json").read_text()
    drawn = iter(["20310102T000000Z-abcd", "20310102T000000Z-abce"])
    monkeypatch.setattr(audit.pipeline, "new_run_id", lambda: next(drawn))
    code = run_cli([command, "-i", str(inv), "-o", str(out)], monkeypatch)
    said = capsys.readouterr()
    assert code == 0, said.err
    assert (out / "20310102T000000Z-abcd" / "manifest.json").read_text() == before  # the first run, untouched
    assert json.loads((out / "20310102T000000Z-abce" / "manifest.json").read_text())["stages_started"] >= 1


@contextmanager
def _diff_still_running(inv: Path, out: Path, run_id: str) -> Iterator[subprocess.Popen[bytes]]:
    """`replica-audit diff` of run `run_id` in a process of its own, held inside the stage while the block
    runs: the snapshot listing it reads is a FIFO the test writes only then, as a slow pair's diff works
    for minutes. It then ends as it would have."""
    listing = out / run_id / "snapshots" / "assets" / "master" / "files.json"
    content = listing.read_bytes()
    listing.unlink()
    os.mkfifo(listing)
    args = ["diff", "-i", str(inv), "-o", str(out), "--run-id", run_id]
    proc = subprocess.Popen([*CLI, *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                fd = os.open(listing, os.O_WRONLY | os.O_NONBLOCK)  # once the diff opened it to read
                break
            except OSError as e:
                if e.errno != errno.ENXIO:  # ENXIO: no reader yet
                    raise
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the diff never opened the listing"
            time.sleep(0.05)
        try:
            yield proc
        finally:
            os.write(fd, content)
            os.close(fd)
        proc.wait(timeout=120)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    "again", [["snapshot", "--run-id", "r1"], ["run", "--resume", "r1"]], ids=["snapshot", "resume"]
)
def test_a_stage_of_a_pair_whose_stage_still_runs_is_refused_not_run_under_it(
    again: list[str], dirfiles_kind: None, tmp_path: Path
) -> None:
    master, replica = make_dirs(tmp_path)
    inv = inventory(tmp_path / "inv.yaml", master, replica)
    out = tmp_path / "out"
    assert _cli("snapshot", "-i", str(inv), "-o", str(out), "--run-id", "r1").returncode == 0
    (replica / "same.txt").write_bytes(b"changed")  # what a snapshot started now would see

    with _diff_still_running(inv, out, "r1") as diff:
        # an operator re-runs the snapshot, or resumes the run, taking the slow diff for a dead one; it
        # deleted the snapshots the diff was reading and snapshotted anew beneath it (exit 0), or ran a
        # second diff on the listing the first one reads (a timeout here)
        second = _cli(again[0], "-i", str(inv), "-o", str(out), *again[1:], timeout_s=60)
        assert second.returncode == 2, second.stderr
        assert f"still running: diff of pair assets (pid {diff.pid})" in second.stderr, second.stderr
        assert "Traceback" not in second.stderr
    assert diff.returncode == 0, diff.communicate()
    # the diff compared the snapshot it started on, and nothing else went on in the run meanwhile
    assert pair_verdict(RunDir(out, "r1"), "assets")["status"] == "incomplete"
    assert json.loads((out / "r1" / "manifest.json").read_text())["stages_started"] == 2


@contextmanager
def held_for_ever(lock: Path) -> Iterator[None]:
    """Another process holding the flock on `lock` (stopped, or hung on a dead mount) until the block ends."""
    hold = (
        "import fcntl, sys, time; f = open(sys.argv[1], 'a+b'); fcntl.flock(f, fcntl.LOCK_EX); "
        "print(1, flush=True); time.sleep(600)"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold, str(lock)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"1\n"
        yield
    finally:
        holder.kill()
        holder.wait()


def test_a_runs_lock_held_for_ever_is_an_error_naming_it_not_a_hang(
    dirfiles_kind: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A process holding OUT/.runs.lock and never letting go (stopped, or hung on a dead mount) made every
    command on OUT wait for ever, saying nothing."""
    import audit.layout

    master, replica = make_dirs(tmp_path)
    inv = inventory(tmp_path / "inv.yaml", master, replica)
    out = tmp_path / "out"
    out.mkdir()
    with held_for_ever(out / ".runs.lock"):
        monkeypatch.setattr(audit.layout, "RUNS_LOCK_WAIT_S", 2.0)
        started = time.monotonic()
        code = run_cli(["run", "-i", str(inv), "-o", str(out), "--run-id", "r1", "--quiet"], monkeypatch)
        assert time.monotonic() - started < 60
    said = capsys.readouterr().err
    assert code == 2, said
    assert f"{out.resolve()}/.runs.lock" in said and "held by another process" in said and "Traceback" not in said


def test_a_data_docs_lock_held_for_ever_fails_the_gate_and_the_prune_naming_it_not_a_hang(
    dirfiles_kind: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """OUT/gx/.lock, which gates (validating, writing Data Docs) and prunes (dropping a run's results) take
    in turn: held for ever by another process, every gate and prune waited for ever, saying nothing. The
    pair is in error and the run incomplete (exit 3: the gate could not run), the prune an error (exit 2)."""
    import audit.layout

    master, replica = make_dirs(tmp_path)
    inv = inventory(tmp_path / "inv.yaml", master, replica)
    out = tmp_path / "out"
    (out / "gx").mkdir(parents=True)
    lock = out / "gx" / ".lock"
    monkeypatch.setattr(audit.layout, "GX_LOCK_WAIT_S", 2.0)
    with held_for_ever(lock):
        started = time.monotonic()
        code = run_cli(["run", "-i", str(inv), "-o", str(out), "--run-id", "r1", "--quiet"], monkeypatch)
        pruned = run_cli(["prune", "-o", str(out), "--keep-days", "1"], monkeypatch)
        assert time.monotonic() - started < 120
    said = " ".join(capsys.readouterr().err.split())  # the console wraps its lines at its width
    assert (code, pruned) == (3, 2), said
    assert said.count(f"{lock.resolve()}: held by another process") == 2 and "Traceback" not in said, said
    assert json.loads((out / "r1" / "summary.json").read_text())["pairs"][0]["status"] == "error"
