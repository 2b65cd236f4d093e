"""Audits that overlap, as scheduled ones do: two commands given one run id at once, a stage started on a
pair whose stage still runs. Neither may mix its results with the other's.

The tests' own kind (tests/kinds/dirfiles.py) needs no server nor Spark; the other command is a real
`replica-audit` process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import audit.cli.main as cli
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
