"""A side's binlog files must be whole from the first to the manifest's: audit/sources/pika/file_chain.py.

A file missing in the middle, an entry that is no file, or a file emptied or cut at a record boundary
once passed with exit 0, the records in it silently not audited."""

from __future__ import annotations

from audit.sources.pika.file_chain import FileFacts, chain_findings

D = "/log/log_db0"
SIZE = 8216


def rolled(n: int, *, end: int = SIZE, damaged: bool = False) -> FileFacts:
    """A file Pika moved to by a rollover: its first record embeds (n - 1, size of n - 1)."""
    return FileFacts(n, f"{D}/write2file{n}", end, damaged, "record", (n - 1, SIZE) if n else (0, 0))


def healthy(upto: int) -> list[FileFacts]:
    return [rolled(n) for n in range(upto + 1)]


def where(found: list) -> list[tuple[str, str | None, str | None, str]]:  # type: ignore[type-arg]
    return [(f.category, f.start, f.end, f.evidence["reason"]) for f in found]


def test_a_healthy_chain_has_no_finding() -> None:
    assert chain_findings("master", 0, D, healthy(5), [], 5) == []
    # purged files below the first are not missing; nor is a file past the last
    assert chain_findings("master", 0, D, healthy(5)[3:], [], 5) == []


def test_a_file_missing_in_the_middle_is_damage_naming_it() -> None:
    files = [f for f in healthy(5) if f.filenum != 2]
    (got,) = chain_findings("replica", 0, D, files, [], 5)
    assert (got.category, got.start, got.end, got.db, got.bytes) == ("corrupt_record", "2:0", "3:0", 0, SIZE)
    assert got.evidence["side"] == "replica" and got.evidence["file"] == f"{D}/write2file2"
    assert got.evidence["reason"].startswith("write2file2 missing")
    (run,) = chain_findings("master", 0, D, [f for f in healthy(5) if f.filenum not in (2, 3)], [], 5)
    assert (run.start, run.end, run.bytes) == ("2:0", "4:0", None)
    assert "write2file2 to write2file3" in run.evidence["reason"]


def test_the_file_the_manifest_names_missing_is_damage() -> None:
    (got,) = chain_findings("master", 0, D, healthy(3), [], 5)
    assert (got.start, got.end) == ("4:0", "6:0")


def test_files_below_a_full_sync_point_may_be_missing() -> None:
    # after a full sync to (7, O) the slave recreates write2file7 padded, or at (7, 0) its first record
    # embeds (7, 0): files 4-6 never existed on this slave, and 1-3 are an earlier life's
    old = healthy(3)[1:]
    for first in (
        FileFacts(7, f"{D}/write2file7", 900, False, "padding", None),
        FileFacts(7, f"{D}/write2file7", 900, False, "record", (7, 0)),
        FileFacts(7, f"{D}/write2file7"),  # nothing written since
    ):
        assert chain_findings("replica", 0, D, [*old, first], [], 7) == []


def test_an_unreadable_entry_is_damage_at_its_place() -> None:
    files = [f for f in healthy(5) if f.filenum != 2]
    unreadable = [(2, f"{D}/write2file2", "cannot stat: Too many levels of symbolic links")]
    (got,) = chain_findings("master", 0, D, files, unreadable, 5)
    assert where([got]) == [
        ("corrupt_record", "2:0", "2:0", "write2file2 cannot be read as a binlog file: " + unreadable[0][2])
    ]
    assert got.evidence["file"] == f"{D}/write2file2"


def test_a_file_emptied_or_cut_at_a_record_boundary_is_damage() -> None:
    for end in (0, 4000, SIZE + 100):
        files = healthy(5)
        files[2] = rolled(2, end=end)
        (got,) = chain_findings("master", 0, D, files, [], 5)
        lo, hi = sorted((end, SIZE))
        assert (got.start, got.end, got.bytes) == (f"2:{lo}", f"2:{hi}", hi - lo)
        assert got.evidence["reason"] == (
            f"write2file2 ends at {end}, but write2file3's first record says it ended at {SIZE} when Pika moved on"
        )


def test_a_file_cut_mid_record_also_names_the_rest_it_lost() -> None:
    """Its corrupt_record row covers the cut record only; the bytes from the cut to where Pika left the
    file are lost records too, and once went unsaid."""
    files = healthy(5)
    files[2] = rolled(2, end=4000, damaged=True)
    (got,) = chain_findings("master", 0, D, files, [], 5)
    assert (got.category, got.start, got.end, got.bytes) == ("corrupt_record", "2:4000", f"2:{SIZE}", SIZE - 4000)


def test_a_file_already_damaged_or_followed_by_a_file_of_unknown_start_is_not_measured_again() -> None:
    files = healthy(5)
    files[2] = rolled(2, end=SIZE + 4000, damaged=True)  # a zero-filled tail past its end: its own row says it
    assert chain_findings("master", 0, D, files, [], 5) == []
    files = healthy(5)
    files[2] = rolled(2, end=4000)
    files[3] = FileFacts(3, f"{D}/write2file3", SIZE, True, "corrupt_record", None)
    assert chain_findings("master", 0, D, files, [], 5) == []
