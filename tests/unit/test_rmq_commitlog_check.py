"""The commit-log check's reading of a side (audit/sources/rocketmq/commitlog_check.py): what it refuses
to audit, with a short message naming the pair, the side and the path."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from audit.errors import SnapshotError
from audit.local.rocketmq_commitlog import write_store
from audit.sources.rocketmq.commitlog_check import check_readable, read_side
from audit.sources.rocketmq.store import commitlog_files
from tests.unit.test_rmq_diff import msg

FILE_SIZE = 4096
REPO = Path(__file__).resolve().parents[2]


def _store(root: Path) -> list[Path]:
    write_store(root, [msg(i) for i in range(120)], file_size=FILE_SIZE, preallocate=False)
    return [f.path for f in commitlog_files(root)]


def test_a_healthy_side_is_listed_with_its_sizes(tmp_path: Path) -> None:
    paths = _store(tmp_path)
    meta = read_side("mq", "master", str(tmp_path))
    assert meta["store_dir"] == str(tmp_path / "commitlog") and meta["unlisted"] == []
    assert [(start, size) for start, _, size in meta["files"]] == [(int(p.name), p.stat().st_size) for p in paths]


def test_files_that_are_all_empty_are_not_audited(tmp_path: Path) -> None:
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / ("0" * 20)).touch()
    with pytest.raises(SnapshotError, match=r"pair mq: replica store .*commitlog: no commit-log data: all 1 files"):
        read_side("mq", "replica", str(tmp_path))


def test_a_store_of_unreadable_entries_only_names_them(tmp_path: Path) -> None:
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / ("0" * 20)).symlink_to("0" * 20)
    with pytest.raises(SnapshotError, match=r"no readable commit-log files \(0{20}: Too many levels of symbolic"):
        read_side("mq", "master", str(tmp_path))


def test_a_store_dir_that_loops_is_a_short_error(tmp_path: Path) -> None:
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(SnapshotError) as e:
        read_side("mq", "master", str(tmp_path / "loop"))
    assert str(e.value).startswith(f"pair mq: master store {tmp_path / 'loop'}: cannot read ")
    assert "Too many levels of symbolic links" in str(e.value) and "\n" not in str(e.value)


_UNPRIVILEGED = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--inh-caps"]


def _refused(code: str) -> str:
    """Run `code` where file permissions apply (root drops the capabilities that bypass them); its stdout."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("root without setpriv: file permissions cannot be made to apply")
        prefix = [*_UNPRIVILEGED, "-dac_override,-dac_read_search"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


_READ = """
from audit.errors import SourceError
from audit.sources.rocketmq.commitlog_check import check_readable, read_side
try:
    {call}
except SourceError as e:
    print(type(e).__name__, e)
"""


@pytest.mark.parametrize("what", ["root", "commitlog", "middle file", "last file"])
def test_a_path_the_system_refuses_is_a_snapshot_error_naming_side_and_path(tmp_path: Path, what: str) -> None:
    paths = _store(tmp_path)
    refused = {"root": tmp_path, "commitlog": tmp_path / "commitlog", "middle file": paths[2], "last file": paths[-1]}
    target = refused[what]
    target.chmod(0)
    try:
        out = _refused(_READ.format(call=f"read_side('mq', 'master', {str(tmp_path)!r})"))
    finally:
        target.chmod(0o755)
    named = tmp_path / "commitlog" if what == "root" else target  # a refused root is refused at its commitlog/
    assert out.strip() == f"SnapshotError pair mq: master store {tmp_path}: cannot read {named}: Permission denied"


def test_a_file_refused_when_the_diff_starts_is_a_source_error(tmp_path: Path) -> None:
    paths = _store(tmp_path)
    check_readable("mq", "replica", [str(p) for p in paths])  # all readable: nothing raised
    paths[1].chmod(0)
    try:
        out = _refused(_READ.format(call=f"check_readable('mq', 'replica', {[str(p) for p in paths]!r})"))
    finally:
        paths[1].chmod(0o644)
    assert out.strip() == f"SourceError pair mq: replica file {paths[1]}: cannot read: Permission denied"
    # A file gone since the listing was deleted by the broker's retention: the diff leaves it out.
    check_readable("mq", "replica", [str(tmp_path / "gone")])
