"""RocketMQ audits through the CLI while tests/rmq_live.py writes the pair in a process of its own, as
brokers do: records visible byte by byte, the next file preallocated, HA chunks cut anywhere, the
oldest files deleted by retention on each side at its own moment. A healthy pair shows lag and torn
tails at most; a message the slave holds with other bytes is found at its offset."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.integration.helpers import findings, latest_run, run_cli, summary, write_inventory

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


@contextmanager
def live_pair(root: Path, *args: str, ready: int = 6) -> Iterator[dict[str, Any]]:
    """The writer running on `root` until the block ends; yields its progress once the master has written
    `ready` files, the slave has started to follow, and retention (if any) has deleted a file on both."""
    cmd = [sys.executable, "-m", "tests.rmq_live", str(root), "--seconds", "300", "--file-size", "65536"]
    proc = subprocess.Popen([*cmd, "--sleep", "0.02", *args], cwd=REPO)  # a later --sleep in args wins
    progress = root / "progress.json"
    try:
        deadline = time.monotonic() + 120
        state: dict[str, Any] = {}
        while time.monotonic() < deadline and proc.poll() is None:
            state = json.loads(progress.read_text()) if progress.exists() else {}
            retention = "--keep" not in args or (state.get("master_deleted") and state.get("slave_deleted"))
            if state.get("master_offset", 0) >= ready * 65536 and state.get("slave_offset") and retention:
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the writer stopped early"
        yield state
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def audit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, Path]:
    pair = {
        "name": "mq",
        "kind": "rocketmq",
        "master": {"store_dir": str(tmp_path / "live" / "m")},
        "replica": {"store_dir": str(tmp_path / "live" / "s")},
    }
    inv = write_inventory(tmp_path / "inv.yaml", [pair])
    code = run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch)
    return code, latest_run(tmp_path / "out")


def test_a_healthy_pair_under_writes_and_retention_shows_no_divergence(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Retention keeps 100 files of 64 KiB, some 100 s of writes at about 60 KiB/s (--sleep 0.05): files
    # are deleted while the audit reads, as on a broker, but not all it listed (that is an error, exit 3).
    retention = ("--history", "105", "--keep", "100", "--sleep", "0.05")
    with live_pair(tmp_path / "live", *retention, "--lag", "0.2") as before:
        code, root = audit(tmp_path, monkeypatch)
    after = json.loads((tmp_path / "live" / "progress.json").read_text())
    assert after["master_offset"] > before["master_offset"]  # the master really grew while being read
    assert len(after["master_deleted"]) > len(before["master_deleted"])  # and retention went on deleting
    assert {f["category"] for f in findings(root)} <= {"torn_tail"}
    assert code == 0
    coverage = summary(root)["pairs"][0]["coverage"]
    assert coverage["bytes_compared"] > 0


def test_a_changed_message_under_writes_is_found_at_its_offset(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    with live_pair(tmp_path / "live", "--change", "40", "--lag", "0.2") as before:
        assert before["changed_at"] is not None
        code, root = audit(tmp_path, monkeypatch)
    rows = findings(root)
    divergent = [(f["category"], f["start_num"]) for f in rows if f["category"] != "torn_tail"]
    assert divergent == [("divergent_entry", before["changed_at"])]
    assert code != 0


def test_a_message_the_slave_never_got_under_writes_is_one_missing_record(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Past the skipped message the slave writes every later one at its own offset, one record early: the
    shift is no finding, and its end, still following the master, is lag."""
    with live_pair(tmp_path / "live", "--skip", "40", "--lag", "0.2") as before:
        code, root = audit(tmp_path, monkeypatch)
    skipped_at, size, _ = before["records"][40]
    rows = [f for f in findings(root) if f["category"] != "torn_tail"]
    assert [(f["category"], f["start_num"], f["count"], f["bytes"]) for f in rows] == [
        ("missing_range", skipped_at, 1, size)
    ]
    assert code != 0
