"""Whether a store's commit-log files follow one another (audit/sources/rocketmq/contiguity.py). Pure."""

from __future__ import annotations

from audit.sources.rocketmq.contiguity import holes

F = 4096


def run(n: int, *, last: int = F) -> list[tuple[int, int]]:
    """n files of F bytes named by their offsets, the last one `last` bytes long."""
    return [(i * F, F if i < n - 1 else last) for i in range(n)]


def test_a_healthy_run_of_files_has_no_hole() -> None:
    assert holes(run(5)) == []
    assert holes(run(5, last=2440)) == []  # a last file still being written (or not preallocated)
    assert holes(run(5, last=0)) == []  # a broker that just rolled to a new, empty file
    assert holes([(3 * F, F), (4 * F, 100)]) == []  # older files deleted: the log starts later
    assert holes([]) == [] and holes(run(1, last=0)) == []


def test_a_missing_middle_file_is_named() -> None:
    files = [f for f in run(5) if f[0] != 2 * F]
    (h,) = holes(files)
    assert (h.start, h.end, h.reason, h.file) == (2 * F, 3 * F, "missing_file", f"{2 * F:020d}")
    assert h.evidence["missing_files"] == [f"{2 * F:020d}"] and h.evidence["missing_file_count"] == 1
    (two,) = holes([f for f in run(6) if f[0] not in (2 * F, 3 * F)])
    assert (two.start, two.end, two.evidence["missing_file_count"]) == (2 * F, 4 * F, 2)


def test_an_empty_or_short_file_that_is_not_the_last() -> None:
    files = run(5)
    files[2] = (2 * F, 0)
    (h,) = holes(files)
    assert (h.start, h.end, h.reason, h.file) == (2 * F, 3 * F, "empty_file", f"{2 * F:020d}")
    files[2] = (2 * F, 1000)
    (h,) = holes(files)
    assert (h.start, h.end, h.reason, h.evidence["position"]) == (2 * F + 1000, 3 * F, "short_file", 1000)


def test_an_unreadable_entry_is_the_hole_it_leaves() -> None:
    files = [f for f in run(5) if f[0] != 2 * F]
    (h,) = holes(files, [(f"{2 * F:020d}", "Too many levels of symbolic links")])
    assert (h.start, h.end, h.reason, h.file) == (2 * F, 3 * F, "unreadable_file", f"{2 * F:020d}")
    assert h.evidence["error"] == "Too many levels of symbolic links"
    # after the last file there is no range to leave out, but the entry is still reported
    (after,) = holes(run(2), [(f"{2 * F:020d}", "not a regular file")])
    assert (after.start, after.end, after.reason) == (2 * F, None, "unreadable_file")


def test_a_stray_name_is_misplaced_and_an_overflowing_one_out_of_range() -> None:
    (h,) = holes([*run(5, last=2440), (99999, 6)])
    assert (h.reason, h.file, h.evidence["expected_next_file"]) == ("misplaced_file", f"{99999:020d}", f"{5 * F:020d}")
    (big,) = holes(run(5), [("99999999999999999999", "offset beyond 2^63-1")])
    assert (big.start, big.end, big.reason, big.file) == (None, None, "name_out_of_range", "99999999999999999999")


def test_overlapping_files() -> None:
    (h,) = holes([(0, F), (F // 2, F)])
    assert (h.start, h.end, h.reason, h.evidence["overlap_bytes"]) == (F // 2, None, "overlapping_files", F // 2)
