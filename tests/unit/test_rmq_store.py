"""Listing a store's commit-log files (audit/sources/rocketmq/store.py): what is a file, and what is not."""

from __future__ import annotations

from pathlib import Path

from audit.local.rocketmq_commitlog import write_store
from audit.sources.rocketmq.store import commitlog_files, list_store
from tests.unit.test_rmq_diff import msg

FILE_SIZE = 4096


def test_entries_named_like_files_that_are_none_are_unlisted_not_dropped(tmp_path: Path) -> None:
    write_store(tmp_path, [msg(i) for i in range(120)], file_size=FILE_SIZE, preallocate=False)
    folder = tmp_path / "commitlog"
    names = sorted(p.name for p in folder.iterdir())
    (folder / names[2]).unlink()
    (folder / names[2]).symlink_to(names[2])  # a loop
    (folder / names[3]).unlink()
    (folder / names[3]).symlink_to("gone")  # dangling
    (folder / "99999999999999999999").write_bytes(b"x")  # beyond a Java long
    (folder / "00000000000000999424").mkdir()
    (folder / "README").write_text("not a commit-log name")
    listing = list_store(tmp_path)
    assert [f.path.name for f in listing.files] == [names[0], names[1], *names[4:]]
    problems = {u.name: u.problem for u in listing.unlisted}
    assert problems == {
        names[2]: "Too many levels of symbolic links",
        names[3]: "No such file or directory",
        "99999999999999999999": "offset beyond 2^63-1, the largest a broker can write",
        "00000000000000999424": "not a regular file",
    }
    assert commitlog_files(tmp_path) == listing.files


def test_a_healthy_store_has_nothing_unlisted(tmp_path: Path) -> None:
    write_store(tmp_path, [msg(i) for i in range(120)], file_size=FILE_SIZE)
    listing = list_store(tmp_path)
    assert len(listing.files) >= 5 and listing.unlisted == []
    assert commitlog_files(tmp_path / "nowhere") == []
