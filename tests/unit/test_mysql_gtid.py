"""GTID sets of both flavours as interval sets: parsing, subtraction, ranges, MariaDB errant detection."""

from __future__ import annotations

import pytest

from audit.errors import ParseError
from audit.sources.mysql import gtid

A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
B = "6f1b4f28-0c5e-11ef-8f35-0242ac120002"


def test_interval_arithmetic() -> None:
    assert gtid.normalize([(7, 9), (1, 5), (6, 6), (12, 12)]) == ((1, 9), (12, 12))
    assert gtid.subtract_intervals(((1, 10),), ((3, 4), (8, 20))) == ((1, 2), (5, 7))
    assert gtid.subtract_intervals(((1, 5), (7, 9)), ((1, 9),)) == ()
    assert gtid.subtract_intervals(((1, 5), (7, 9)), ()) == ((1, 5), (7, 9))
    assert gtid.subtract_intervals(((5, 5),), ((1, 4), (6, 8))) == ((5, 5),)
    assert gtid.size(((1, 5), (7, 9))) == 8


def test_mysql_set_parses_several_sources_newlines_and_case() -> None:
    s = gtid.parse_mysql(f"{A.upper()}:1-5:7-9,\n{B}:1-3")
    assert s.sets == {A: ((1, 5), (7, 9)), B: ((1, 3),)}
    assert len(s) == 11 and str(s) == f"{A}:1-5:7-9,{B}:1-3"
    assert gtid.parse_mysql("").sets == {} and not gtid.parse_mysql("")


def test_mysql_tagged_gtids_are_their_own_source() -> None:
    s = gtid.parse_mysql(f"{A}:1-5:Tag_1:1-2:4")
    assert s.sets == {A: ((1, 5),), f"{A}:tag_1": ((1, 2), (4, 4))}


def test_missing_and_errant_ranges_with_first_and_last_gtid() -> None:
    master = gtid.parse_mysql(f"{A}:1-100")
    replica = gtid.parse_mysql(f"{A}:1-40:43-90,{B}:1-2")
    missing = master - replica
    assert [(r.first, r.last, r.count) for r in missing.ranges()] == [
        (f"{A}:41", f"{A}:42", 2),
        (f"{A}:91", f"{A}:100", 10),
    ]
    errant = replica - master
    assert [(r.source, r.start, r.end) for r in errant.ranges()] == [(B, 1, 2)]


@pytest.mark.parametrize(
    "text",
    [f"{A}", "not-a-uuid:1-5", f"{A}:5-1", f"{A}:0-3", f"{A}:1-x", f"{A}:1-5:-tag"],
)
def test_mysql_garbage_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        gtid.parse_mysql(text)


def test_mariadb_position_is_every_seq_up_to_the_last() -> None:
    s = gtid.parse_mariadb("0-1-102,1-5-7")
    assert s.sets == {"0": ((1, 102),), "1": ((1, 7),)} and s.servers == {"0": 1, "1": 5}
    lag = s - gtid.parse_mariadb("0-1-100,1-5-7")
    assert [(r.first, r.last, r.count) for r in lag.ranges()] == [("0-1-101", "0-1-102", 2)]
    assert str(s) == "0-1-102,1-5-7"
    assert gtid.parse("mariadb", "").sets == {}
    with pytest.raises(ParseError):
        gtid.parse_mariadb("0-1")
    with pytest.raises(ValueError, match="cannot compare"):
        _ = s - gtid.parse_mysql(f"{A}:1")


def test_mariadb_errant_write_on_the_replica() -> None:
    # replica applied 0-1-100 from server 1, then a local write was binlogged as 0-2-101
    errant = gtid.mariadb_errant(replica_state="0-1-100,0-2-101", master_state="0-1-100", replica_slave_pos="0-1-100")
    assert [(r.first, r.last, r.count) for r in errant.ranges()] == [("0-2-101", "0-2-101", 1)]
    # the master went on to 0-1-105: seq 101 exists on both, but as different transactions
    errant = gtid.mariadb_errant("0-1-100,0-2-101", "0-1-105", "0-1-100")
    assert [(r.first, r.last) for r in errant.ranges()] == [("0-2-101", "0-2-101")]
    # a replica without log_slave_updates binlogs only its own writes: three of them
    errant = gtid.mariadb_errant("0-2-103", "0-1-100", "0-1-100")
    assert [(r.first, r.last, r.count) for r in errant.ranges()] == [("0-2-101", "0-2-103", 3)]
    # ... and once it has applied the master's later 0-1-104..110, its last errant GTID is still named
    errant = gtid.mariadb_errant("0-2-103", "0-1-110", "0-1-110")
    assert [(r.first, r.last, r.count) for r in errant.ranges()] == [("0-2-103", "0-2-103", 1)]


def test_mariadb_no_errant_when_the_replica_only_replays() -> None:
    assert not gtid.mariadb_errant("0-1-100", "0-1-120", "0-1-100")
    assert not gtid.mariadb_errant("", "0-1-120", "0-1-120")
    # a former master's own writes that this master has too (after a switchover) are not errant
    assert not gtid.mariadb_errant("0-2-50,0-1-100", "0-2-50,0-1-120", "0-1-100")


def test_another_connections_domain_is_not_errant_up_to_what_it_received() -> None:
    # the hub binlogs master A's domain 0 and, through connection 'b', master B's domain 1
    assert gtid.mariadb_errant("0-1-9,1-3-5", "0-1-9", "0-1-9,1-3-5", other_masters="1-3-5").ranges() == []
    beyond = gtid.mariadb_errant("0-1-9,1-3-5,1-2-6", "0-1-9", "0-1-9,1-3-5", other_masters="1-3-5")
    assert [(r.source, r.start, r.end) for r in beyond.ranges()] == [("1", 6, 6)]  # written on the hub itself
    # a connection's position in this master's own domain excuses nothing there
    own = gtid.mariadb_errant("0-1-9,0-2-10", "0-1-9", "0-1-9", other_masters="0-1-9,0-2-10")
    assert [(r.start, r.end) for r in own.ranges()] == [(10, 10)]
