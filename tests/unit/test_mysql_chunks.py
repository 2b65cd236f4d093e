"""Kind mysql's engine parts that need no server: recheck verdicts, keyless count merging, task spreading,
key-order planning, merging streams sorted by key digest."""

from __future__ import annotations

from audit.sources.mysql.row_diff import RowDiff
from audit.sources.mysql.values import Column, SideSql, TablePlan

COLUMNS = (
    Column("k", "varbinary", "varbinary(16)", nullable=False),
    Column("n", "int", "int(11)", nullable=False),
    Column("note", "text", "text"),
)
PLAN = TablePlan("s", "t", COLUMNS, ("k", "n"), SideSql((), None), SideSql((), None))
MASTER_ROW = (b"\x00\xff", b"7", b"it's fine")


def test_a_recheck_round_tells_converged_in_flight_and_persisting_rows() -> None:
    from audit.sources.mysql.rows import category_of, differing_columns, reread

    diff = RowDiff(0, (b"\x00\xff", 7), MASTER_ROW, None, 1, None)
    changed = (b"\x00\xff", b"7", b"other")
    # the replica caught up: converged
    assert reread(diff, (MASTER_ROW, 1), (MASTER_ROW, 1), (MASTER_ROW, 1)) is None
    # the master held still while the replica, at or past it, shows another value: a divergence
    persisting = reread(diff, (MASTER_ROW, 1), (changed, 2), (MASTER_ROW, 1))
    assert persisting is not None and not persisting.in_flight and category_of(persisting) == "row_mismatch"
    assert differing_columns(PLAN, persisting) == ["note"] and persisting.replica_hash == 2
    # the master changed the row between its two reads: no verdict this round
    in_flight = reread(diff, (MASTER_ROW, 1), (changed, 2), (changed, 2))
    assert in_flight is not None and in_flight.in_flight
    # gone on the replica, still on the master: missing; gone on both: converged
    missing = reread(diff, (MASTER_ROW, 1), None, (MASTER_ROW, 1))
    assert missing is not None and category_of(missing) == "missing_row"
    assert reread(diff, None, None, None) is None


def test_keyless_counts_merge_as_they_stream() -> None:
    from audit.sources.mysql.chunks import merge_counts

    a = iter([(b"1", b"2"), (b"5", b"1"), (b"9", b"3")])
    b = iter([(b"1", b"2"), (b"7", b"1"), (b"9", b"1"), (b"12", b"4")])
    assert list(merge_counts(a, b)) == [(1, 2, 2), (5, 1, 0), (7, 0, 1), (9, 3, 1), (12, 0, 4)]
    assert list(merge_counts(iter([]), iter([]))) == []


def test_segments_are_spread_over_the_tasks_heaviest_first() -> None:
    from audit.sources.mysql.spark_job import assign

    assert assign([100, 10, 60, 50, 5], 2) == [[0, 1, 4], [2, 3]]  # loads 115 and 110
    assert assign([1, 1, 1], 8) == [[0], [1], [2]]
    assert assign([], 4) == []


def test_runs_of_two_sorted_streams_are_paired_by_key() -> None:
    from audit.sources.mysql.unordered import merge_runs

    a = iter([(b"a", b"1"), (b"c", b"2"), (b"c", b"3")])  # two keys with one digest: one run
    b = iter([(b"b", b"4"), (b"c", b"5")])
    assert list(merge_runs(a, b, lambda row: bytes(row[0] or b""))) == [
        ([(b"a", b"1")], []),
        ([], [(b"b", b"4")]),
        ([(b"c", b"2"), (b"c", b"3")], [(b"c", b"5")]),
    ]
    assert list(merge_runs(iter([]), iter([]), lambda row: 0)) == []


def test_a_key_whose_collation_differs_is_planned_without_ranges() -> None:
    from audit.sources.mysql.catalog import plan_table
    from audit.sources.mysql.values import TableDef, UniqueKey

    def table(collation: str, key_type: str = "varchar") -> TableDef:
        key = Column("k", key_type, key_type, nullable=False, charset="utf8mb4", collation=collation)
        return TableDef("s", "t", (key, Column("v", "int", "int(11)")), (UniqueKey("PRIMARY", ("k",), True),))

    same = plan_table(table("utf8mb4_general_ci"), table("utf8mb4_general_ci"))
    assert same.ranges and (same.master.index, same.replica.index) == ("PRIMARY", "PRIMARY")
    other = plan_table(table("utf8mb4_general_ci"), table("utf8mb4_bin"))
    assert other.key == ("k",) and not other.ranges
    assert (other.master.index, other.replica.index) == (None, None)  # whole-table scans: no index to force
    assert plan_table(table("utf8mb4_general_ci"), table("utf8mb4_general_ci", "char")).ranges
