"""Finding a side's binlog files (audit/sources/pika/logfiles.py `discover`): what it reads, what it says it
could not read, and errors that name the side and the path (never a traceback: README, exit codes)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from audit.errors import SnapshotError
from audit.local.pika_binlog import BinlogWriter
from audit.sources.pika import logfiles
from audit.sources.pika.logfiles import discover

FILES = 6  # write2file0..5 with the writer below


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("log")
    with BinlogWriter(root / "log_db0", file_size=8192, preallocate=False) as w:
        for i in range(400):
            w.append([b"SET", b"key:%d" % i, b"v" * 40], exec_time=1_700_000_000)
    return root


@pytest.fixture
def log(written: Path, tmp_path: Path) -> Path:
    shutil.copytree(written, tmp_path / "log", symlinks=True)
    return tmp_path / "log"


def test_a_healthy_log_is_read_whole_and_only_the_manifest_file_is_last(log: Path) -> None:
    (db,) = discover(log, None, "master")
    assert [f.filenum for f in db.files] == list(range(FILES)) and (db.cut, db.unreadable, db.past_cut) == (5, (), ())
    assert [f.last for f in db.files] == [False] * 5 + [True]
    assert db.files[-1].logical_end == db.manifest.pro_offset if db.manifest else False
    (log / "log_db0" / "manifest").unlink()  # no manifest: the highest file is the last, read to its end
    (db,) = discover(log, None, "master")
    assert [f.last for f in db.files] == [False] * 5 + [True] and db.files[-1].logical_end is None


def test_entries_that_are_no_file_are_listed_with_why(log: Path) -> None:
    d = log / "log_db0"
    (d / "write2file2").unlink()
    (d / "write2file2").symlink_to("write2file2")
    (d / "write2file9").mkdir()  # past the manifest, and no file: a stray, ignored
    (db,) = discover(log, None, "replica")
    assert [f.filenum for f in db.files] == [0, 1, 3, 4, 5]
    assert db.unreadable == ((2, str(d / "write2file2"), "cannot stat: Too many levels of symbolic links"),)
    assert db.past_cut == ()


def test_files_past_the_manifest_position_are_said_not_skipped(log: Path) -> None:
    # a zeroed manifest read as "file 0 up to offset 0": 0 records, 5 files skipped, a passed gate
    manifest = log / "log_db0" / "manifest"
    manifest.write_bytes(bytes(24) + manifest.read_bytes()[24:])
    (db,) = discover(log, None, "master")
    assert [f.filenum for f in db.files] == [0] and db.files[0].logical_end == 0
    assert [n for n, _ in db.past_cut] == [1, 2, 3, 4, 5]
    assert db.past_cut[0][1] == str(log / "log_db0" / "write2file1")


def test_a_file_created_after_the_manifest_was_read_is_past_the_cut_quietly(
    log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pika rolls over to write2file6 while the audit reads the manifest: not a stale manifest
    read = logfiles._manifest

    def roll_while_reading(directory: Path, side: str) -> object:
        got = read(directory, side)
        (directory / "write2file6").write_bytes(b"")
        return got

    monkeypatch.setattr(logfiles, "_manifest", roll_while_reading)
    (db,) = discover(log, None, "master")
    assert (db.cut, db.past_cut, [f.filenum for f in db.files]) == (5, (), list(range(FILES)))


@pytest.mark.parametrize(
    ("manifest", "said"),
    [
        (b"\0" * 10, "manifest is 10 bytes, needs 24"),
        (b"", "manifest is 0 bytes, needs 24"),
        (struct.pack("<IQQI", 5, (1 << 63) + 5, 0, 0), "pro_offset 9223372036854775813"),
    ],
)
def test_a_damaged_manifest_names_the_side_the_file_and_the_field(log: Path, manifest: bytes, said: str) -> None:
    path = log / "log_db0" / "manifest"
    path.write_bytes(manifest)
    with pytest.raises(SnapshotError) as e:
        discover(log, None, "replica")
    assert str(e.value).startswith(f"replica binlog manifest {path} is damaged: ") and said in str(e.value)
    assert e.value.where == str(path)


def test_a_looping_log_directory_names_the_side_and_path(log: Path) -> None:
    shutil.rmtree(log / "log_db0")
    (log / "log_db0").symlink_to("log_db0")
    with pytest.raises(SnapshotError) as e:
        discover(log, None, "master")
    message = str(e.value)
    assert message.startswith("master binlog ") and str(log / "log_db0") in message and e.value.where in message
    assert message.endswith(": Too many levels of symbolic links")


def _unprivileged() -> list[str] | None:
    """A command prefix that takes away the file-permission overrides root has, or None if it cannot."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    caps = "-dac_override,-dac_read_search"
    return [setpriv, "--bounding-set", caps, "--inh-caps", caps]


@pytest.mark.parametrize("target", ["log_db0", ".", "log_db0/write2file2", "log_db0/manifest"])
def test_permission_denied_is_a_snapshot_error_naming_side_and_path(log: Path, target: str) -> None:
    prefix = _unprivileged()
    if prefix is None:
        pytest.skip("running as root without setpriv: permissions cannot be denied")
    path = (log / target).resolve()
    code = (
        "import sys\nfrom pathlib import Path\nfrom audit.errors import SnapshotError\n"
        "from audit.sources.pika.logfiles import discover\n"
        "try:\n    discover(Path(sys.argv[1]), None, 'replica')\n"
        "except SnapshotError as e:\n    print(e.where)\n    print(e)\n    sys.exit(3)\n"
    )
    path.chmod(0)
    try:
        run = subprocess.run([*prefix, sys.executable, "-c", code, str(log)], capture_output=True, text=True)
    finally:
        path.chmod(0o755)
    assert run.returncode == 3, run.stderr  # was a PermissionError traceback, exit 4
    where, message = run.stdout.splitlines()
    assert where.startswith(str(path)) and where in message  # log_db0/, or the manifest in it
    assert message.startswith("replica binlog ") and message.endswith(": Permission denied")
