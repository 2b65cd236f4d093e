"""A kind of the tests' own (tests/kinds/dirfiles.py) runs through the real CLI: the kernel needs nothing
else from it than its module, one registry entry and its suite."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.helpers import findings, latest_run, run_cli, summary

REGISTRY_ENTRY = "dirfiles=tests.kinds.dirfiles"


def make_dirs(root: Path) -> tuple[Path, Path]:
    master, replica = root / "m", root / "r"
    for d in (master, replica):
        (d / "sub").mkdir(parents=True)
        (d / "same.txt").write_bytes(b"same")
        (d / "sub" / "deep.bin").write_bytes(bytes(range(256)))
    return master, replica


def inventory(path: Path, master: Path, replica: Path) -> Path:
    pair = {"name": "assets", "kind": "dirfiles", "master": {"path": str(master)}, "replica": {"path": str(replica)}}
    path.write_text(json.dumps({"pairs": [pair]}))
    return path


def test_own_kind_finds_planted_differences(dirfiles_kind: None, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    master, replica = make_dirs(tmp_path)
    (master / "only-master.txt").write_text("m")
    (replica / "only-replica.txt").write_text("r")
    (replica / "sub" / "deep.bin").write_bytes(b"changed")
    inv = inventory(tmp_path / "inv.yaml", master, replica)
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out"), "--json"], monkeypatch) == 1
    root = latest_run(tmp_path / "out")
    got = {(f["category"], f["key"], f["check"], f["kind"]) for f in findings(root)}
    assert got == {
        ("missing_on_replica", b"only-master.txt", "files", "dirfiles"),
        ("extra_on_replica", b"only-replica.txt", "files", "dirfiles"),
        ("value_mismatch", b"sub/deep.bin", "files", "dirfiles"),
    }
    s = summary(root)["pairs"][0]
    assert s["status"] == "failed" and s["coverage"] == {"master_files": 3, "replica_files": 3, "files_compared": 2}
    assert {f["column"] for f in s["gate"]["failed"]} == {"missing_on_replica", "extra_on_replica", "value_mismatch"}


def test_own_kind_passes_on_equal_directories_and_reports_bad_input(
    dirfiles_kind: None, tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    master, replica = make_dirs(tmp_path)
    inv = inventory(tmp_path / "inv.yaml", master, replica)
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 0
    assert findings(latest_run(tmp_path / "out")) == []
    gone = inventory(tmp_path / "gone.yaml", master, tmp_path / "nowhere")
    assert run_cli(["run", "-i", str(gone), "-o", str(tmp_path / "out2")], monkeypatch) == 3
    s = summary(latest_run(tmp_path / "out2"))["pairs"][0]
    assert s["status"] == "error" and "nowhere: no such directory" in s["error"]["message"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps({"pairs": [{"name": "a", "kind": "dirfiles", "master": {"path": "/x"}}]}))
    assert run_cli(["run", "-i", str(bad), "-o", str(tmp_path / "out3")], monkeypatch) == 2
