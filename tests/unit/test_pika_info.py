"""Pika `INFO replication` parsing and per-DB replication detectors, on the real Pika 4.0 output in
tests/fixtures/pika/ and on the older space-separated format."""

from __future__ import annotations

import pytest

from audit.sources.pika.info import BinlogOffset, parse_pika_replication
from audit.sources.pika.replication import PikaSample, offset_lag, pika_replication_findings, wrong_master
from tests.conftest import FIXTURES

FIXTURES = FIXTURES / "pika"

OLD_SLAVE = """# Replication(SLAVE)\r
role:slave\r
master_host:10.0.208.2\r
master_port:9042\r
master_link_status:up\r
slave_priority:100\r
slave_read_only:1\r
db0 binlog_offset=179 30537223,safety_purge=write2file169\r
db1 binlog_offset=0 0,safety_purge=none\r
"""
SYNCING_SLAVE = """# Replication(SLAVE)\r
role:slave\r
master_host:127.0.0.1\r
master_port:19221\r
master_link_status:down\r
repl_connect_status:\r
db0:connected\r
db1:syncing_full\r
slave_priority:100\r
db_repl_state:(db1:WaitDBSync)\r
db0:binlog_offset=1 100,safety_purge=none\r
db1:binlog_offset=0 0,safety_purge=none\r
"""


def _read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_real_master_and_slave_of_pika_4() -> None:
    m = parse_pika_replication(_read("phase1_master_info_replication.txt"))
    s = parse_pika_replication(_read("phase1_slave_info_replication.txt"))
    assert m.role == "master" and not m.is_slave
    assert m.binlog == {
        0: BinlogOffset(1, 101921, "none"),
        1: BinlogOffset(1, 78826, "none"),
        2: BinlogOffset(1, 78826, "none"),
    }
    assert [(e.ip, e.port, e.conn_fd, e.lag) for e in m.slaves] == [("127.0.0.1", 19321, 155, {0: 0, 1: 0, 2: 0})]
    assert s.is_slave and (s.master_host, s.master_port, s.master_link_status) == ("127.0.0.1", 19221, "up")
    assert s.repl_connect_status == {0: "connected", 1: "connected", 2: "connected"}
    assert s.binlog == m.binlog
    # slave_repl_offset sums filenum * binlog-file-size (128 KiB in that pair) + offset over the DBs
    assert s.slave_repl_offset == sum(o.filenum * 128 * 1024 + o.offset for o in s.binlog.values())


def test_info_all_gives_the_same_replication_view() -> None:
    full = parse_pika_replication(_read("phase1_master_info_all.txt"))
    assert full == parse_pika_replication(_read("phase1_master_info_replication.txt"))


def test_space_separated_format_before_3_5_3() -> None:
    s = parse_pika_replication(OLD_SLAVE)
    assert s.binlog == {0: BinlogOffset(179, 30537223, "write2file169"), 1: BinlogOffset(0, 0, "none")}
    assert s.binlog[0].position == 179 << 32 | 30537223


def test_db_states_and_lag_strings() -> None:
    s = parse_pika_replication(SYNCING_SLAVE)
    assert s.repl_connect_status == {0: "connected", 1: "syncing_full"} and s.db_repl_state == {1: "WaitDBSync"}
    m = parse_pika_replication(
        "role:master\r\nslave0:ip=10.0.0.2,port=9221,conn_fd=7,lag=(db0:1234)(db1:full syncing)\r\n"
    )
    assert m.slaves[0].lag == {0: 1234, 1: "full syncing"}


def _sample(m: str, s: str, at: int = 0) -> PikaSample:
    return PikaSample(at, parse_pika_replication(m), parse_pika_replication(s))


def test_healthy_real_pair_has_no_findings() -> None:
    phase1 = (_read("phase1_master_info_replication.txt"), _read("phase1_slave_info_replication.txt"))
    found = pika_replication_findings(
        [_sample(*phase1), _sample(*phase1, at=1100)], [0, 1, 2], 19321, 128 * 1024, 10 << 20
    )
    assert found == []
    assert wrong_master(parse_pika_replication(phase1[1]), "127.0.0.1", 19221) is None


def test_wrong_master_link_down_ahead_and_lagging() -> None:
    slave = parse_pika_replication(_read("phase1_slave_info_replication.txt"))
    assert wrong_master(slave, "127.0.0.1", 9999) is not None
    down = pika_replication_findings(
        [_sample(_read("phase1_master_info_replication.txt"), SYNCING_SLAVE)], [0, 1], 19321, 1 << 20, None
    )
    assert [(f.category, f.db) for f in down if f.category == "link_down"] == [("link_down", 1)]
    master = _read("phase1_master_info_replication.txt")
    ahead = master.replace("db0:binlog_offset=1 101921", "db0:binlog_offset=1 100")
    found = pika_replication_findings(
        [_sample(ahead, _read("phase1_slave_info_replication.txt"))], [0, 1, 2], 19321, 128 * 1024, 10 << 20
    )
    assert [(f.category, f.db, f.bytes) for f in found] == [("replica_ahead", 0, 101821)]
    behind = master.replace("db2:binlog_offset=1 78826", "db2:binlog_offset=3 0")
    found = pika_replication_findings(
        [_sample(behind, _read("phase1_slave_info_replication.txt"))], [0, 1, 2], 19321, 128 * 1024, 1000
    )
    assert [(f.category, f.db) for f in found] == [("lagging", 2)]
    assert offset_lag(BinlogOffset(3, 0), BinlogOffset(1, 78826), 128 * 1024) == found[0].bytes


@pytest.mark.parametrize("reported", ["0", "not syncing"])
def test_lag_figure_that_contradicts_the_offsets_is_unreliable(reported: str) -> None:
    master = _read("phase1_master_info_replication.txt").replace("(db1:0)", f"(db1:{reported})")
    master = master.replace("db1:binlog_offset=1 78826", "db1:binlog_offset=1 90000")
    slave = _read("phase1_slave_info_replication.txt")
    found = pika_replication_findings(
        [_sample(master, slave), _sample(master, slave, 1100)], [0, 1, 2], 19321, 128 * 1024, 10 << 20
    )
    assert [(f.category, f.db) for f in found] == [("lag_metric_unreliable", 1)]
    assert found[0].evidence["master_reported_lag"] == (0 if reported == "0" else reported)


def test_a_manifest_behind_the_servers_binlog_offset_is_flagged() -> None:
    from audit.sources.pika.replication import manifest_behind_info

    info = BinlogOffset(3, 500)
    assert manifest_behind_info("master", 0, info, (3, 500)) is None  # the same position
    assert manifest_behind_info("master", 0, info, (3, 900)) is None  # written between the two reads
    stale = manifest_behind_info("replica", 1, info, (2, 99_000))
    assert stale is not None and (stale.category, stale.db, stale.start, stale.end) == (
        "lag_metric_unreliable",
        1,
        "3:500",
        "2:99000",
    )
    assert stale.evidence["side"] == "replica"


def test_offsets_for_the_report_are_per_db_byte_positions() -> None:
    from audit.sources.pika.replication_check import BINLOG_UNIT, offsets_of

    info = (
        "# Replication\r\nrole:{role}\r\ndb0:binlog_offset={f0} {o0},safety_purge=none\r\ndb1 binlog_offset=0 {o1}\r\n"
    )
    sample = PikaSample(
        at_ms=5,
        master=parse_pika_replication(info.format(role="master", f0=2, o0=100, o1=50)),
        slave=parse_pika_replication(info.format(role="slave", f0=2, o0=60, o1=50)),
    )
    offsets = offsets_of([sample], [0, 1], file_size=1000)
    assert offsets.unit == BINLOG_UNIT
    assert offsets.by_db == {"db0": {"master": 2100.0, "replica": 2060.0}, "db1": {"master": 50.0, "replica": 50.0}}
    assert offsets.last == (2150.0, 2110.0)
