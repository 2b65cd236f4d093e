"""Replication state of kind mysql, the pure parts: status names, which row follows the master, lag vs loss."""

from __future__ import annotations

from audit.sources.mysql import gtid
from audit.sources.mysql.filters import ReplicationFilters
from audit.sources.mysql.replication import (
    MasterIdentity,
    following,
    link_down_finding,
    normalise_status,
    split_missing,
    wrong_master_finding,
)

MASTER = MasterIdentity("127.0.0.1", 3306, "1", None)
A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def test_mysql_8_names_read_as_the_old_ones() -> None:
    row = normalise_status({"Replica_IO_Running": "Yes", "Source_Host": "h", "Seconds_Behind_Source": "3"})
    assert row == {"Slave_IO_Running": "Yes", "Master_Host": "h", "Seconds_Behind_Master": "3"}


def test_the_row_that_follows_the_master() -> None:
    other = {"Master_Host": "10.9.9.9", "Master_Port": "3306", "Master_Server_Id": "7", "Slave_IO_Running": "Yes"}
    ours = {"Master_Host": "localhost", "Master_Port": "3306", "Master_Server_Id": "1", "Slave_IO_Running": "No"}
    assert following([other, ours], MASTER) is ours
    via_vip = {"Master_Host": "10.1.1.1", "Master_Port": "3306", "Master_Server_Id": "1", "Slave_IO_Running": "Yes"}
    assert following([via_vip], MASTER) is via_vip
    assert following([other], MASTER) is None
    by_uuid = {"Master_Host": "x", "Master_Port": "1", "Master_UUID": A.upper()}
    assert following([by_uuid], MasterIdentity("h", 3306, "9", A)) is by_uuid


def test_wrong_master_and_link_down_evidence() -> None:
    assert wrong_master_finding([], MASTER).evidence["reason"] == "not a replica"
    f = wrong_master_finding([{"Master_Host": "10.9.9.9", "Master_Port": "3306", "Master_Server_Id": "7"}], MASTER)
    assert f.category == "wrong_master" and f.evidence["follows"] == [{"master": "10.9.9.9:3306", "server_id": "7"}]
    down = link_down_finding({"Slave_IO_Running": "Yes", "Slave_SQL_Running": "No", "Last_SQL_Error": "dup key"})
    assert down.category == "link_down" and down.evidence["last_error"] == "dup key"


def test_a_tail_on_a_running_link_is_lag_a_hole_or_a_stopped_link_is_loss() -> None:
    master = gtid.parse_mysql(f"{A}:1-100")
    replica = gtid.parse_mysql(f"{A}:1-40:43-90")
    lost, lag = split_missing(master - replica, replica, up=True)
    assert [(r.start, r.end) for r in lost] == [(41, 42)] and [(r.start, r.end) for r in lag] == [(91, 100)]
    lost, lag = split_missing(master - replica, replica, up=False)
    assert [(r.start, r.end) for r in lost] == [(41, 42), (91, 100)] and lag == []
    m, r = gtid.parse_mariadb("0-1-10,5-1-3"), gtid.parse_mariadb("0-1-8")
    lost, lag = split_missing(m - r, r, up=True, ignored_sources=frozenset({"5"}))
    assert [r.first for r in lost] == ["5-1-1"] and [r.first for r in lag] == ["0-1-9"]


def _rules(**lists: str) -> ReplicationFilters:
    return ReplicationFilters.from_status({f"Replicate_{k}": v for k, v in lists.items()})


def test_replication_filters_follow_the_servers_order_of_rules() -> None:
    assert not _rules() and _rules().excluding("s", "t") is None
    ignore = _rules(Ignore_Table="s.a,s.b", Wild_Ignore_Table="s.tmp\\_%,log%.%")
    assert ignore.excluding("s", "b") == "replicate_ignore_table = s.b"
    assert ignore.excluding("s", "tmp_1") == "replicate_wild_ignore_table = s.tmp\\_%"
    assert ignore.excluding("s", "tmpx1") is None  # `\_` is a literal underscore
    assert ignore.excluding("log2024", "x") == "replicate_wild_ignore_table = log%.%"
    assert ignore.excluding("s", "c") is None
    do = _rules(Do_Table="s.a", Wild_Do_Table="s.keep%", Wild_Ignore_Table="s.%")
    assert do.excluding("s", "a") is None and do.excluding("s", "keep1") is None  # a do rule is read first
    assert do.excluding("s", "z") == "replicate_wild_ignore_table = s.%"
    assert "not s2.a" in (_rules(Do_Table="s.a").excluding("s2", "a") or "")
    assert _rules(Do_DB="s,u").excluding("t", "a") == "replicate_do_db = s,u (not t)"
    assert _rules(Do_DB="s", Ignore_Table="s.a").excluding("s", "a") == "replicate_ignore_table = s.a"
    assert _rules(Ignore_DB="x").excluding("x", "a") == "replicate_ignore_db = x"
    assert ReplicationFilters.from_status({"Replicate_Ignore_Table": "S.A"}, fold=True).excluding("s", "a")


def test_domains_a_connection_does_not_replicate_leave_the_position_it_claims() -> None:
    from audit.sources.mysql.replication import _ignored_domains, _without_domains

    master = gtid.parse("mariadb", "0-1-9,1-3-4,2-5-7")
    assert _ignored_domains({"Replicate_Ignore_Domain_Ids": "2"}, master) == {"2"}
    assert _ignored_domains({"Replicate_Do_Domain_Ids": "0,1"}, master) == {"2"}
    assert _ignored_domains({}, master) == frozenset()
    # domain 2 skipped (its seq 7 claimed, never applied); domain 1 came through another connection up to 3
    assert _without_domains("0-1-9,1-3-4,2-5-7", frozenset({"1", "2"}), "1-3-3") == "0-1-9,1-3-3"
