"""Pika binlog directories damaged as a whole, audited end to end: a file missing, unreadable, emptied or cut
in the middle of the log, a manifest zeroed, cut or out of range, a looping directory. Each once passed
with exit 0 (records silently not audited) or crashed with exit 4; each is now damage with its place,
an uncovered part the gate counts, or exit 3 naming the side and the path. One run audits every case
(one Spark session), next to a healthy pair and a torn last file that must stay clean."""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from audit.local.pika_binlog import BinlogWriter
from audit.sources.pika.binlog import scan_binlog
from tests.integration.helpers import findings, latest_run, run_cli, summary, write_inventory

pytestmark = pytest.mark.integration
T0 = 1_700_000_000


def _write(root: Path) -> None:
    with BinlogWriter(root / "log_db0", file_size=8192, preallocate=False) as w:
        for i in range(400):
            w.append([b"SET", b"key:%d" % i, b"v" * 40], exec_time=T0 + i)


def _truncate(name: str, size: int) -> Callable[[Path], None]:
    def do(d: Path) -> None:
        with open(d / name, "r+b") as f:
            f.truncate(size)

    return do


def _zero(name: str, start: int, size: int) -> Callable[[Path], None]:
    def do(d: Path) -> None:
        data = bytearray((d / name).read_bytes())
        data[start : start + size] = bytes(len(data[start : start + size]))
        (d / name).write_bytes(bytes(data))

    return do


def _loop(d: Path) -> None:
    (d / "write2file2").unlink()
    (d / "write2file2").symlink_to("write2file2")


def _loop_dir(d: Path) -> None:
    shutil.rmtree(d)
    d.symlink_to(d.name)


def _manifest(pro_num: int, pro_offset: int) -> Callable[[Path], None]:
    def do(d: Path) -> None:
        data = bytearray((d / "manifest").read_bytes())
        data[:12] = struct.pack("<IQ", pro_num, pro_offset)
        (d / "manifest").write_bytes(bytes(data))

    return do


CASES: dict[str, Callable[[Path], None] | None] = {
    "healthy": None,
    "gap": lambda d: (d / "write2file2").unlink(),
    "loop": _loop,
    "empty": _truncate("write2file2", 0),
    "cut": _truncate("write2file2", 5000),
    "zeroed_mid": _zero("write2file2", 1000, 1 << 20),
    "torn_last": _truncate("write2file5", 200),
    "zero_manifest": _zero("manifest", 0, 24),
    "short_manifest": _truncate("manifest", 10),
    "huge_offset": _manifest(5, (1 << 63) + 5),
    "loop_dir": _loop_dir,
}


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path, Path]:
    tmp = tmp_path_factory.mktemp("damaged")
    clean = tmp / "clean"
    _write(clean)
    pairs: list[dict[str, Any]] = []
    for name, damage in CASES.items():
        for side in ("m", "s"):
            shutil.copytree(clean, tmp / name / side)
            if damage is not None:
                damage(tmp / name / side / "log_db0")
        dirs = {"master_dir": str(tmp / name / "m"), "replica_dir": str(tmp / name / "s")}
        pairs.append({"name": name, "kind": "pika", "binlog": dirs})
    inv = write_inventory(tmp / "inv.yaml", pairs)
    with pytest.MonkeyPatch.context() as mp:
        code = run_cli(["run", "-i", str(inv), "-o", str(tmp / "out")], mp)
    return code, latest_run(tmp / "out"), tmp


def _pair(audited: tuple[int, Path, Path], name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    _, root, _ = audited
    (got,) = [p for p in summary(root)["pairs"] if p["pair"] == name]
    return got, [f for f in findings(root) if f["pair"] == name]


def _damage(found: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    out = []
    for f in found:
        detail = json.loads(f["detail"])
        out.append((f["category"], f["start"], detail["side"], detail["reason"]))
    return sorted(out)


def test_a_healthy_pair_and_a_torn_last_file_still_pass(audited: tuple[int, Path, Path]) -> None:
    pair, found = _pair(audited, "healthy")
    assert (pair["status"], pair["exit_code"], found, pair["not_covered"]) == ("passed", 0, [], [])
    assert pair["metrics"]["master_binlog_records"] == 400
    pair, found = _pair(audited, "torn_last")
    assert (pair["status"], [f["category"] for f in found]) == ("passed", ["torn_tail", "torn_tail"])


def _record_at(clean: Path, offset: int) -> int:
    """The start of the record of clean write2file2 that holds `offset`."""
    rows = scan_binlog((clean / "log_db0" / "write2file2").read_bytes(), db=0, filenum=2).to_pylist()
    (r,) = [r for r in rows if r["start"] <= offset < r["end"]]
    return int(r["start"])


@pytest.mark.parametrize(
    ("case", "cut_at", "reason"),
    [
        ("gap", None, "write2file2 missing"),
        ("loop", None, "write2file2 cannot be read as a binlog file: cannot stat: Too many levels of symbolic"),
        ("empty", None, "write2file2 ends at 0, but write2file3's first record says it ended at {size}"),
        ("cut", 5000, "record cut in a file that is not the last: fragment payload cut by the end of data"),
        ("zeroed_mid", 1000, "record cut in a file that is not the last: record cut where the zero-filled"),
    ],
)
def test_a_file_lost_in_the_middle_of_the_log_is_damage_with_its_place(
    audited: tuple[int, Path, Path], case: str, cut_at: int | None, reason: str
) -> None:
    # 79 of 400 records silently not audited, exit 0 (or an info-level torn_tail)
    _, _, tmp = audited
    pair, found = _pair(audited, case)
    assert (pair["status"], pair["exit_code"]) == ("failed", 1)
    got = _damage(found)
    size = (tmp / "clean" / "log_db0" / "write2file2").stat().st_size
    if cut_at is not None:  # the rest of the file, from the cut to where Pika left it, is a second finding
        rest = [g for g in got if g[1] == f"2:{cut_at}"]
        assert [(c, side) for c, _, side, _ in rest] == [("corrupt_record", "master"), ("corrupt_record", "replica")]
        assert all(r.startswith(f"write2file2 ends at {cut_at}, but write2file3's first") for *_, r in rest)
        lost = {(f["end"], f["bytes"]) for f in found if f["start"] == f"2:{cut_at}"}
        assert lost == {(f"2:{size}", size - cut_at)}
        got = [g for g in got if g not in rest]
    start = f"2:{0 if cut_at is None else _record_at(tmp / 'clean', cut_at)}"
    assert [(c, s, side) for c, s, side, _ in got] == [
        ("corrupt_record", start, "master"),
        ("corrupt_record", start, "replica"),
    ]
    assert all(r.startswith(reason.format(size=size)) for *_, r in got), got
    assert json.loads(found[0]["detail"])["file"].startswith(str(tmp / case))


def test_files_past_a_zeroed_manifest_are_uncovered_and_fail_the_gate(audited: tuple[int, Path, Path]) -> None:
    # 1 file read to offset 0, 5 skipped, 0 records: passed
    pair, found = _pair(audited, "zero_manifest")
    assert (pair["status"], pair["exit_code"], found) == ("failed", 1, [])
    (failed,) = pair["gate"]["failed"]
    assert (failed["column"], failed["observed"]) == ("uncovered", 10)
    assert pair["metrics"]["master_binlog_files_past_manifest"] == 5
    assert any("write2file5 lies past the manifest" in n and "master" in n for n in pair["notes"])


@pytest.mark.parametrize(
    ("case", "file", "said"),
    [
        ("short_manifest", "log_db0/manifest", "manifest is 10 bytes, needs 24"),
        ("huge_offset", "log_db0/manifest", "manifest field pro_offset 9223372036854775813 is over"),
        ("loop_dir", "log_db0", "cannot list: Too many levels of symbolic links"),
    ],
)
def test_a_side_that_cannot_be_read_is_exit_3_naming_side_and_path(
    audited: tuple[int, Path, Path], case: str, file: str, said: str
) -> None:
    # exit 4 with a Py4J NumberFormatException or an OSError traceback; or a message with no path or side
    pair, found = _pair(audited, case)
    _, _, tmp = audited
    error = pair["error"]
    assert (pair["status"], pair["exit_code"], error["internal"], found) == ("error", 3, False, [])
    path = tmp / case / "s" / file  # the slave is read first
    assert error["message"].startswith("replica binlog ") and str(path) in error["message"], error
    assert said in error["message"] and error["where"] == str(path)


def test_the_run_exit_code_is_the_most_serious_pair(audited: tuple[int, Path, Path]) -> None:
    assert audited[0] == 3
